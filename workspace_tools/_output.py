"""Tool results split by reader: content for the model, details and presentation for the app."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

IMAGE_MEDIA_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


class ToolPresentation(BaseModel):
    """How a client draws one call in a list of steps.

    ``label`` is a short fixed name ("Read file"), ``icon`` a Lucide icon name
    (https://lucide.dev/icons), ``detail`` one line of context (a path, a pattern).
    """

    model_config = ConfigDict(frozen=True)

    label: str
    icon: str | None = None
    detail: str | None = None


class TextPart(BaseModel):
    """A text part of media content."""

    model_config = ConfigDict(frozen=True)

    type: Literal["text"] = "text"
    text: str


class ImagePart(BaseModel):
    """An image part: ``data`` is base64 (standard alphabet) of a PNG, JPEG, GIF or WebP."""

    model_config = ConfigDict(frozen=True)

    type: Literal["image"] = "image"
    data: str
    media_type: str

    @field_validator("media_type")
    @classmethod
    def _known_image_type(cls, value: str) -> str:
        if value not in IMAGE_MEDIA_TYPES:
            allowed = ", ".join(sorted(IMAGE_MEDIA_TYPES))
            # Name the way out: any other media type is a file part, described to the model.
            raise ValueError(
                f"image media type must be one of {allowed}, not {value!r}; send it as "
                f"file_part(data, {value!r}) instead"
            )
        return value

    def to_bytes(self) -> bytes:
        """The decoded image bytes."""
        return base64.b64decode(self.data)


class FilePart(BaseModel):
    """Any other file: base64 ``data``, its ``media_type`` and an optional ``name``."""

    model_config = ConfigDict(frozen=True)

    type: Literal["file"] = "file"
    data: str
    media_type: str
    name: str | None = None

    def to_bytes(self) -> bytes:
        """The decoded file bytes."""
        return base64.b64decode(self.data)


ContentPart = Annotated[TextPart | ImagePart | FilePart, Field(discriminator="type")]


class ToolContent(BaseModel):
    """Media content: an ordered list of text, image and file parts (see :func:`tool_content`)."""

    model_config = ConfigDict(frozen=True)

    type: Literal["tool-content"] = "tool-content"
    parts: list[ContentPart]

    def describe(self) -> str:
        """The content as plain text, for models that cannot take media.

        Text parts are kept; an image or file becomes ``[image/png, 12.3 KB]``.
        """
        out: list[str] = []
        for part in self.parts:
            if isinstance(part, TextPart):
                out.append(part.text)
            else:
                size = len(part.to_bytes())
                name = f"{part.name}: " if isinstance(part, FilePart) and part.name else ""
                out.append(f"[{name}{part.media_type}, {_human_size(size)}]")
        return "\n".join(out)


def _human_size(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / (1024 * 1024):.1f} MB"


def _as_base64(data: bytes | str) -> str:
    if isinstance(data, bytes):
        return base64.b64encode(data).decode("ascii")
    try:
        base64.b64decode(data, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"data is neither bytes nor valid base64: {exc}") from exc
    return data


def text_part(text: str) -> TextPart:
    """A text part for :func:`tool_content`."""
    return TextPart(text=text)


def image_part(data: bytes | str, media_type: str) -> ImagePart:
    """An image part from raw bytes or base64 text; ``media_type`` is PNG, JPEG, GIF or WebP."""
    return ImagePart(data=_as_base64(data), media_type=media_type)


def file_part(data: bytes | str, media_type: str, name: str | None = None) -> FilePart:
    """A file part from raw bytes or base64 text."""
    return FilePart(data=_as_base64(data), media_type=media_type, name=name)


def tool_content(*parts: str | TextPart | ImagePart | FilePart) -> ToolContent:
    """Media content from parts; a plain ``str`` is a text part.

    Example: ``tool_content("Screenshot:", image_part(png_bytes, "image/png"))``.
    """
    return ToolContent(parts=[TextPart(text=p) if isinstance(p, str) else p for p in parts])


class ToolOutput(BaseModel):
    """A tool's result split by reader.

    ``content`` (a JSON value or :class:`ToolContent`) reaches the model and the application;
    ``details`` (a JSON value or pydantic model) and ``presentation`` the application only.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    content: Any
    details: Any = None
    presentation: ToolPresentation | None = None


def tool_output(
    content: Any, details: Any = None, presentation: ToolPresentation | None = None
) -> ToolOutput:
    """Build a :class:`ToolOutput`; see its docstring for who reads which field."""
    return ToolOutput(content=content, details=details, presentation=presentation)


def is_tool_output(value: object) -> bool:
    """Whether ``value`` is a :class:`ToolOutput`."""
    return isinstance(value, ToolOutput)


def tool_output_content(value: object) -> Any:
    """What a model reads of any tool return value: a ToolOutput's content, else the value."""
    return value.content if isinstance(value, ToolOutput) else value
