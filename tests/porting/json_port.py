"""A port "in another language": a process that speaks the runner's JSON Lines protocol on
stdin/stdout. Here it wraps the reference core, as a template for a real port's entry point."""

import json
import sys

from reserve_occupy import StalenessController
from reserve_occupy.trace import event_to_record, parse_config


def main() -> None:
    controller = None
    for line in sys.stdin:
        request = json.loads(line)
        op = request["op"]
        if op == "config":  # a new vector: a fresh controller
            controller = StalenessController(parse_config(request))
            answer = {"ok": True}
        else:
            before = len(controller.events)
            method = getattr(controller, op)
            method(request["unit"]) if "unit" in request else method()
            if len(controller.events) > before:
                answer = event_to_record(controller.events[-1])
            else:
                answer = {"refused": True}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
