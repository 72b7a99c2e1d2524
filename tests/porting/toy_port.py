"""A deliberately different port, written the way a framework might: per-buffer lists instead of
slot arrays, and "oldest admitted first" where the reference scans slot positions.

It keeps the protocol's safety rules (legal buffers, capacity, closing under oversampling) but
picks different units to shift and move, so its batches differ from the reference's: strict
conformance must reject it and lenient conformance must accept it. It is also the example of an
adapter: ``ToyAdapter`` is the whole glue a port needs.
"""

from __future__ import annotations

from reserve_occupy import Config


class ToyController:
    def __init__(self, config: Config) -> None:
        self.eta, self.b, self.c = config.max_staleness, config.batch_size, config.capacity
        self.limit = config.max_concurrency
        self.version = self.head = 0
        self.training = False
        self.res: dict[int, list] = {}  # buffer -> reservations, oldest first
        self.occ: dict[int, list] = {}  # buffer -> finished units
        self.where: dict = {}  # unit -> buffer
        self.v_traj: dict = {}
        self.handed: list = []  # streaming: head units given to the trainer since consume
        self._open()

    def _open(self) -> None:
        for v in range(self.head, self.version + self.eta + 1):
            self.res.setdefault(v, [])
            self.occ.setdefault(v, [])

    def _ready(self, v: int) -> bool:
        return len(self.occ[v]) >= self.b

    def _room(self, v: int) -> bool:
        return not self._ready(v) and len(self.res[v]) + len(self.occ[v]) < self.c

    def _latest(self, deadline: int, after: int = -1) -> int | None:
        for v in range(min(deadline, self.version + self.eta), max(self.head, after + 1) - 1, -1):
            if self._room(v):
                return v
        return None

    def reserve(self, u):
        if self.limit is not None and sum(map(len, self.res.values())) >= self.limit:
            return None
        v = self._latest(self.version + self.eta)
        if v is None:
            return None
        self.res[v].append(u)
        self.where[u], self.v_traj[u] = v, self.version
        return v

    def _shift_into(self, gap: int) -> None:
        """The oldest admitted reservation in an earlier buffer that may sit in ``gap``."""
        for v in range(self.head, gap):
            if self._ready(v):
                continue
            for u in self.res[v]:
                if self.v_traj[u] + self.eta >= gap:
                    self.res[v].remove(u)
                    self.res[gap].append(u)
                    self.where[u] = gap
                    return

    def _close(self, v: int, aborted: list) -> None:
        for u in list(self.res[v]):
            self.res[v].remove(u)
            target = self._latest(self.v_traj[u] + self.eta, after=v)
            if target is None:
                del self.where[u]
                aborted.append(u)
            else:
                self.res[target].append(u)
                self.where[u] = target

    def _fill(self, aborted: list) -> None:
        for v in range(self.head, self.version + self.eta + 1):
            while self._room(v):
                donor = next((w for w in range(v + 1, self.version + self.eta + 1)
                              if self.occ[w]), None)
                if donor is None:
                    return
                u = self.occ[donor].pop()
                self.occ[v].append(u)
                self.where[u] = v
                if self._ready(v):
                    self._close(v, aborted)

    def occupy(self, u):
        gap = self.where.pop(u)
        self.res[gap].remove(u)
        self._shift_into(gap)
        for v in range(self.head, self.v_traj[u] + self.eta + 1):
            if self._room(v):
                break
        self.occ[v].append(u)
        self.where[u] = v
        aborted: list = []
        if self._ready(v):
            self._close(v, aborted)
        return {"slot": v, "aborted": aborted}

    def abort(self, u):
        gap = self.where.pop(u)
        self.res[gap].remove(u)
        self._shift_into(gap)
        aborted: list = []
        self._fill(aborted)
        return {"aborted": aborted}

    def filter(self, u):
        v = self.where.pop(u)
        self.occ[v].remove(u)
        aborted: list = []
        self._fill(aborted)
        return {"aborted": aborted}

    def consume(self):
        if self.training or not self._ready(self.head):
            return None
        batch = self.occ.pop(self.head)
        self.res.pop(self.head)
        for u in batch:
            del self.where[u]
        self.head += 1
        self.training = True
        self.handed = []
        return batch

    def stream(self):
        """The head buffer's finished units not handed yet (its fill never takes from the
        head: donors are later buffers, so a handed unit stays)."""
        if self.training:
            raise RuntimeError("stream while training")
        new = [u for u in self.occ[self.head] if u not in self.handed]
        self.handed += new
        return new

    def publish(self):
        self.training = False
        self.version += 1
        self._open()

    def release_stuck(self):
        h = self.head
        if self.training or self._ready(h) or self._room(h) or not self.res[h]:
            return []
        released: list = []
        while self.res[h] and not self._ready(h):
            u = self.res[h].pop(0)
            del self.where[u]
            released.append(u)
            self._fill(released)
        return released


class ToyAdapter:
    """The adapter: a few lines mapping the runner's calls onto the port."""

    def start(self, config: Config) -> None:
        self.port = ToyController(config)

    def __getattr__(self, op: str):
        return getattr(self.port, op)
