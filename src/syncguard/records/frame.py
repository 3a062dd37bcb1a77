"""One frame of a stack: file, line and function, kept structured from the detector to the
code scope; formatted ``"file:line in function"`` only where text is written (a report file, the
terminal), and parsed back once where such text is read (:func:`parse_stack`)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

_TEXT = re.compile(r"^(?P<file>.*):(?P<line>\d+) in (?P<func>.*)$")


@dataclass(frozen=True, slots=True)
class Frame:
    filename: str
    lineno: int
    function: str = "?"

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno} in {self.function}"

    def at(self, filename: str | None, lineno: int | None) -> bool:
        """Whether this frame is the line ``filename:lineno``."""
        return self.filename == filename and self.lineno == lineno


def parse_frame(text: str) -> Frame | None:
    """``"file:line in func"`` (the form a report writes a frame in) -> Frame; None if malformed."""
    m = _TEXT.match(text)
    return Frame(m["file"], int(m["line"]), m["func"]) if m else None


def parse_stack(texts: Iterable[str]) -> tuple[Frame | str, ...]:
    """A stack read from a report, each frame parsed once; text that is not a frame stays text
    (it re-renders as it was, and the code scope skips it)."""
    return tuple(parse_frame(t) or t if isinstance(t, str) else t for t in texts)


def frame_text(frame: Frame | str | None) -> str | None:
    """A frame as a report writes it."""
    return None if frame is None else str(frame)
