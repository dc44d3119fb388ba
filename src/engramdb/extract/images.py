"""Images in messages: find them, and ask a vision model to describe them.

A memory is text, so an image becomes a one- or two-sentence description
(when a vision-capable LLM is configured) that the pipeline puts in the
message in place of the picture.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engramdb.extract.prompting import load_prompt

__all__ = ["image_parts", "vision_prompt"]

_IMAGE_TYPES = ("image_url", "image", "input_image")
# Only what a vision API takes by value or fetches from the web. A file: or
# other URL would ask whichever server handles it to read its own disk.
_ALLOWED_PREFIXES = ("https://", "http://", "data:image/")


def _url_of(part: Mapping[str, Any]) -> str | None:
    for key in ("image_url", "url"):
        value = part.get(key)
        if isinstance(value, Mapping):
            value = value.get("url")
        if isinstance(value, str):
            return value
    source = part.get("source")  # Anthropic-style {"type": "base64", "media_type", "data"}
    if isinstance(source, Mapping):
        if source.get("type") == "base64":
            media, data = source.get("media_type"), source.get("data")
            if isinstance(media, str) and isinstance(data, str):
                return f"data:{media};base64,{data}"
        elif source.get("type") == "url" and isinstance(source.get("url"), str):
            return str(source["url"])
    return None


def image_parts(message_content: object) -> list[str]:
    """Return the image URLs (``http(s)://`` or ``data:image/…``) in a message's content.

    ``message_content`` is what a message's ``content`` holds: a string
    (no images), one content-part dict, or a list of them. Parts of type
    ``image_url`` (OpenAI chat: ``{"image_url": {"url": …}}`` or a bare
    string), ``input_image`` and ``image`` (with a ``url`` or an
    Anthropic-style base64 ``source``) are recognised. URLs of other
    schemes (``file:``, ``ftp:``…) are skipped, as are malformed parts.
    """
    if isinstance(message_content, Mapping):
        parts: list[object] = [message_content]
    elif isinstance(message_content, list | tuple):
        parts = list(message_content)
    else:
        return []
    urls = []
    for part in parts:
        if not isinstance(part, Mapping) or part.get("type") not in _IMAGE_TYPES:
            continue
        url = _url_of(part)
        if url is None:
            continue
        url = url.strip()
        if url.lower().startswith(_ALLOWED_PREFIXES):
            urls.append(url)
    return urls


def vision_prompt(image_url: str) -> list[dict[str, Any]]:
    """One user message asking a vision LLM to describe ``image_url`` in one or two sentences.

    Parse the reply with :func:`engramdb.extract.parse_description`.
    """
    return [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": load_prompt("vision")},
                {"type": "image_url", "image_url": {"url": image_url}},
            ],
        }
    ]
