"""Adapters that plug engramdb into agent frameworks.

Each lives in its own module and imports its framework only when that module
is imported, so ``import engramdb`` never needs them:

- :mod:`engramdb.integrations.langgraph`: a LangGraph ``BaseStore`` backed by
  engramdb (``pip install 'engramdb[langgraph]'``);
- :mod:`engramdb.integrations.openai_agents`: memory tools for the OpenAI
  Agents SDK (``pip install 'engramdb[agents]'``).

See docs/integrations.md.
"""
