"""The one meaning of --overwrite, said the same way on every command that has it (issue 22).

What it always means (files/ownership.py, files/out_folder.py's claim): replace only what an earlier command
of the same kind wrote in --out (the entries its manifest names), and write beside the files tlm did not
write there, never onto one of them. What differs between commands is only when it is NEEDED, because some
commands refresh their own earlier output on a rerun and others refuse to: that is the second sentence of
each help, taken from this table so that it cannot drift from one command to the next."""

from __future__ import annotations

_ALWAYS = ("--overwrite replaces only what an earlier `tlm {kind}` wrote in --out, and writes beside files "
          "tlm did not write, never onto them.")

WHEN_NEEDED = {
    # own_needs_overwrite=True in claim: a second run into the same folder is refused without it
    "train": "Needed to start a run over in a folder an earlier run wrote (--resume continues it instead).",
    "data prepare": "Needed to prepare again into a folder an earlier `tlm data prepare` wrote.",
    "export": "Needed to replace an earlier export (a .gguf file or a folder `tlm export` wrote).",
    "convert llama2c": "Needed to replace a folder an earlier `tlm convert llama2c` wrote.",
    # own_needs_overwrite=False: the same command refreshes its own results without it
    "probe": "Not needed to rerun (an earlier probe's results are replaced anyway); needed to write into "
             "a non-empty folder tlm did not write.",
    "diff": "Not needed to rerun (an earlier diff's results are replaced anyway); needed to write into a "
            "non-empty folder tlm did not write.",
    "trust": "Not needed to rerun (an earlier trust report is replaced anyway); needed to write into a "
             "non-empty folder tlm did not write.",
    "report": "Not needed to rerun (an earlier report is replaced anyway); needed to write into a non-empty "
              "folder tlm did not write.",
    # check_settings: the same comparison continues; a different one is refused without it
    "compare": "Not needed to add seeds to or continue the same comparison; needed to replace a different "
               "comparison in --out (its runs are deleted) or to write into a folder tlm did not write.",
    "demo": "Not needed to rerun or continue the same demo; needed to replace a different earlier demo "
            "(its runs are deleted) or to write into a folder tlm did not write.",
}


def overwrite_help(kind: str) -> str:
    return f"{_ALWAYS.format(kind=kind)} {WHEN_NEEDED[kind]}"
