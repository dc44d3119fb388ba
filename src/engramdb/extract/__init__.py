"""LLM memory extraction, as pure functions: prompts in, validated items out.

Nothing here calls an LLM, reads a database or does I/O beyond loading
its own prompt files; the pipeline in :mod:`engramdb.flows.extraction` does that.

- Additive mode (the default): :func:`build_additive_prompt` →
  LLM (with :data:`ADDITIVE_SCHEMA`) → :func:`parse_additive` →
  :class:`Extracted` items whose ``linked_ids`` are real ids.
- Consolidating mode (opt-in): :func:`build_fact_prompt` →
  :func:`parse_facts`, then :func:`build_update_prompt` →
  :func:`parse_update` → :class:`Operation` items.
- Procedural memory: :func:`build_procedural_prompt` →
  :func:`parse_procedural`.
- Images: :func:`image_parts`, :func:`vision_prompt` →
  :func:`parse_description`.

Every parser raises :class:`~engramdb.errors.ReplyFormatError` for a reply
it cannot use; :func:`retry_messages` builds the one retry from it.
"""

from engramdb.errors import ReplyFormatError
from engramdb.extract.ids import IdMap
from engramdb.extract.images import image_parts, vision_prompt
from engramdb.extract.parse import (
    clean_text,
    parse_additive,
    parse_description,
    parse_facts,
    parse_procedural,
    parse_update,
    retry_messages,
)
from engramdb.extract.prompting import (
    additive_variant,
    build_additive_prompt,
    build_fact_prompt,
    build_procedural_prompt,
    build_update_prompt,
    load_prompt,
    observation_date,
)
from engramdb.extract.repair import repair_json
from engramdb.extract.schemas import (
    ADDITIVE_SCHEMA,
    FACTS_SCHEMA,
    PROCEDURAL_SCHEMA,
    UPDATE_SCHEMA,
)
from engramdb.extract.types import (
    AdditiveContext,
    Attribution,
    ChatMessage,
    Event,
    Extracted,
    KnownMemory,
    Operation,
    ParseOutcome,
)

__all__ = [
    "ADDITIVE_SCHEMA",
    "FACTS_SCHEMA",
    "PROCEDURAL_SCHEMA",
    "UPDATE_SCHEMA",
    "AdditiveContext",
    "Attribution",
    "ChatMessage",
    "Event",
    "Extracted",
    "IdMap",
    "KnownMemory",
    "Operation",
    "ParseOutcome",
    "ReplyFormatError",
    "additive_variant",
    "build_additive_prompt",
    "build_fact_prompt",
    "build_procedural_prompt",
    "build_update_prompt",
    "clean_text",
    "image_parts",
    "load_prompt",
    "observation_date",
    "parse_additive",
    "parse_description",
    "parse_facts",
    "parse_procedural",
    "parse_update",
    "repair_json",
    "retry_messages",
    "vision_prompt",
]
