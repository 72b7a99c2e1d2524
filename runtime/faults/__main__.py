from ..cli import script
from .cli import main

script(main, "python -m runtime.faults")
