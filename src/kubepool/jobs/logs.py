"""What `get_logs(verbose=False)` shows, as Snowflake's ML Jobs show it: the payload's output between the
launcher's banners, without the banners, Ray's start-up output or the runtime's `kubepool[...]` lines.

A banner is a separator line, its marker line and a separator line, in that order, with other lines possibly in
between (stdout and stderr interleave). The output starts after the first start banner (at the beginning when
there is none) and ends at the opening separator of the last end banner after that (the end of the log when there
is none): a log without banners, a head-mode worker's, comes back whole, and marker text the payload printed
itself stays output. `payload_output` reads a whole log; `stream_payload` follows one as it is written.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator

from kubepool.contract import LOG_END_MSG, LOG_START_MSG

SEPARATOR, START_MARKER = LOG_START_MSG.split("\n")[:2]
END_MARKER = LOG_END_MSG.split("\n")[1]


def _banners(texts: list[str], separators: list[int], marker: str) -> list[tuple[int, int]]:
    """(opening, closing) separator positions of each banner of `marker`: the nearest separators around it."""
    out = []
    for i, text in enumerate(texts):
        if text.strip() != marker:
            continue
        before, after = bisect.bisect_left(separators, i) - 1, bisect.bisect_right(separators, i)
        if before >= 0 and after < len(separators):
            out.append((separators[before], separators[after]))
    return out


def payload_span(texts: list[str]) -> tuple[int, int]:
    """The [start, end) of the payload's output among a log's lines."""
    separators = [i for i, text in enumerate(texts) if text.strip() == SEPARATOR]
    starts = _banners(texts, separators, START_MARKER)
    start = starts[0][1] + 1 if starts else 0
    ends = [b for b in _banners(texts, separators, END_MARKER) if b[0] >= start]
    return start, ends[-1][0] if ends else len(texts)


def payload_output(lines: list[str]) -> str:
    """A whole log's payload output, surrounding whitespace stripped (Snowflake's text)."""
    start, end = payload_span(lines)
    return "\n".join(lines[start:end]).strip()


def payload_lines(lines: list[str], text_of: Callable[[str], str] = lambda line: line) -> list[str]:
    """The payload output's lines as they are (`text_of`: a line's text without a prefix such as a timestamp),
    blank lines at either end left out."""
    texts = [text_of(line) for line in lines]
    start, end = payload_span(texts)
    while start < end and not texts[start].strip():
        start += 1
    while end > start and not texts[end - 1].strip():
        end -= 1
    return lines[start:end]


def stream_payload(lines: Iterable[str], text_of: Callable[[str], str] = lambda line: line) -> Iterator[str]:
    """`payload_lines` of a log being written, each line yielded once it is known to be output: after the start
    banner, a line is held only from the last separator on (it may open an end banner) and, after an end banner,
    until a later end banner shows the payload printed it. A log without a start banner is only known at its end."""
    it = iter(lines)
    before: list[str] = []
    sep_seen = marker_seen = False
    for line in it:
        before.append(line)
        text = text_of(line).strip()
        if text == SEPARATOR:
            if marker_seen:
                break  # the start banner is complete
            sep_seen = True
        elif text == START_MARKER and sep_seen:
            marker_seen = True
    else:
        yield from payload_lines(before, text_of)
        return
    yield from _trim_blank(_inside(it, text_of), text_of)


def _inside(it: Iterator[str], text_of: Callable[[str], str]) -> Iterator[str]:
    held: list[str] = []  # not yet known to be output
    last_sep: int | None = None  # position in `held` of its last separator
    end_marker_after_sep = False
    ended = False  # `held` starts at the opening of a complete end banner
    for line in it:
        text = text_of(line).strip()
        if text == SEPARATOR and last_sep is not None and end_marker_after_sep:
            yield from held[:last_sep]  # an end banner completed: everything before its opening is output
            held, ended = held[last_sep:], True
            last_sep = 0
        held.append(line)
        if text == SEPARATOR:
            last_sep, end_marker_after_sep = len(held) - 1, False
        elif text == END_MARKER and last_sep is not None:
            end_marker_after_sep = True
        if not ended and last_sep:
            yield from held[:last_sep]
            held, last_sep = held[last_sep:], 0
    if not ended:
        yield from held


def _trim_blank(lines: Iterator[str], text_of: Callable[[str], str]) -> Iterator[str]:
    blank: list[str] = []
    started = False
    for line in lines:
        if not text_of(line).strip():
            if started:
                blank.append(line)
            continue
        yield from blank
        blank, started = [], True
        yield line
