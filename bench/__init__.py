"""The benchmarks, and what their scripts and the tools that read them share."""
import os


def emit(lines, out=None) -> None:
    """Print a result table's markdown lines and, given ``out``, write them there too, whole or
    not at all (a temporary file beside it, then renamed over it)."""
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        tmp = f"{out}.tmp{os.getpid()}"
        try:
            with open(tmp, "w") as fh:
                fh.write(text)
            os.replace(tmp, out)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
