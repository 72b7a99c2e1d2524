from runtime.cli import script

from .cli import main

script(main, "python -m reserve_occupy_faults")
