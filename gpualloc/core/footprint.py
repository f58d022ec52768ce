"""The elastic footprint, and the price of displacing it.

The footprint is the real-time demand still wanted, packed highest GPU first
around the hard cells (an Occupancy: fixed cells,
started rigid jobs, the EASY reservation) over the rest of the horizon. A
rigid job that starts on a block avoiding it (`avoid`: hard | footprint, with
its free runs) leaves the elastic service untouched; one that starts on it
displaces what `loss` prices: the priority-weighted service lost when the
demand is re-packed without that block. The packing order is type-aware
(`restricted_first`): the services fewer GPUs can hold first (a service
confined to one type or to 80 GB before one that runs anywhere), then their
order of service (priority). In plain priority order, services that run
anywhere land on the last pool, a lower-priority service confined to it then
looks unservable, and rigid jobs take its only GPUs at an estimated loss of
0 (issue 25). Re-packed lazily: columns go stale
when hard cells change where the footprint lies. Packed by priority only,
a re-pack starts at the first service that used a GPU taken from it: those
before it pack as they did (a service's packing is unchanged by losing GPUs
it did not use), which the footprint keeps (`holder`) to skip them.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from gpualloc.core import blocks as kb
from gpualloc.core.classes import restricted_first, serve, unions
from gpualloc.core.layout import Layout
from gpualloc.core.occupancy import Occupancy
from gpualloc.core.pack import fill


class Footprint:
    def __init__(self, lay: Layout, hard: Occupancy, elastic: list[int], need: np.ndarray,
                 demand_aware: bool = True, type_aware: bool = True):
        """`elastic`: the services in their order of service; `need` (J, T):
        replicas each still wants; `type_aware`: pack the most restricted
        services first (else in the order of service)."""
        T, G = lay.T, lay.G
        self.lay, self.hard, self.elastic, self.need = lay, hard, elastic, need
        self.demand_aware = demand_aware
        self.el = np.array(elastic, dtype=np.int64)
        self.order = (restricted_first(lay, elastic) if type_aware and elastic
                      else np.arange(len(elastic), dtype=np.int64))  # (E,) packing order
        self.subsets = unions(lay, elastic) if type_aware and elastic else None  # (U, P)
        self.weight = lay.priority[self.el] * lay.gpus[self.el]  # (E,) value of a replica-step
        self.fp = np.zeros((T, G), dtype=np.bool_)  # (T, G) cells the footprint holds
        self.served = np.zeros((len(elastic), T), dtype=np.int64)  # (E, T) replicas packed
        self.gpus = lay.gpus[self.el]  # (E,)
        E = len(elastic)
        # By priority only: the position (in the packing order) of the service
        # holding each footprint cell (E: none), and per stale column the
        # first service its re-pack redoes.
        self.holder = np.full((T, G), E, dtype=np.int64) if self.subsets is None else None
        self.positions = np.arange(E, dtype=np.int64)
        self.redo = np.zeros(T, dtype=np.int64)  # (T,)
        self.used = np.zeros(T, dtype=np.int64)  # (T,) GPUs the packed replicas hold per step
        self.version = 0  # counts the changes of `run`, as Occupancy.version
        self.avoid = hard.busy.copy()  # (T, G) hard | footprint
        self.run = kb.runs_of(self.avoid)
        self.stale = np.ones(T, dtype=np.bool_)  # (T,) columns whose footprint is stale
        self.any_stale = True
        self.repacks = 0  # re-packs `loss` has done

    def touch(self, lo: int, hi: int, columns: np.ndarray | None = None) -> None:
        """Columns [lo, hi) are stale (those of them marked in `columns`, when
        given: the caller sets what they redo; else all of it)."""
        if columns is None:
            self.stale[lo:hi] = True
            self.redo[lo:hi] = 0
        else:
            self.stale[lo:hi] |= columns
        if self.subsets is not None:  # by class: every column between stale ones re-packs
            at = np.nonzero(self.stale)[0]
            if len(at):
                self.stale[at[0]:at[-1] + 1] = True
        self.any_stale = bool(self.stale.any())

    def changed(self, start: int, end: int, first: int, k: int) -> None:
        """Hard cells changed in a block: the avoid grid follows; the footprint
        is stale only where the block meets it (packing is unchanged by losing
        GPUs it does not use, and the release of a reservation re-packs)."""
        rows = slice(first, first + k)
        self.avoid[start:end, rows] = self.hard.busy[start:end, rows] | self.fp[start:end, rows]
        kb.update_runs(self.avoid, self.run, first, first + k, end)
        self.version += 1

    def freed(self, start: int, end: int, first: int, k: int) -> None:
        """Hard cells of a block were freed (a released reservation, an
        eviction). Packed by priority only, a service fully served before its
        scan (highest GPU first) reaches the block's top node, or one that
        cannot use its pool, packs as before, and so do the ones before it:
        a column re-packs from the first other service."""
        if self.holder is None or not self.elastic:
            self.touch(start, end)
        else:
            lay, cols = self.lay, np.arange(start, end)
            need = self.need[self.el[:, None], cols[None, :]]  # (E, L)
            users = np.empty(end - start, dtype=np.int64)  # (L,)
            served = np.ascontiguousarray(self.served[:, start:end])  # one compiled layout
            _first_reaching(self.holder[start:end], served, need,
                            lay.pool_ok[self.el, lay.gpu_pool[first]], lay.gpu_node,
                            int(lay.gpu_node[first + k - 1]), users)
            self._redo_from(start, end, users)
        self.changed(start, end, first, k)

    def _redo_from(self, start: int, end: int, users: np.ndarray) -> None:
        """Columns [start, end) re-pack from service users[c] on (E: not stale)."""
        meets = users < len(self.elastic)
        if meets.any():
            np.minimum(self.redo[start:end], users, out=self.redo[start:end])
            self.touch(start, end, meets)

    def placed(self, start: int, end: int, first: int, k: int) -> None:
        """A block became hard (a start, a reservation). Packed by priority
        only, a column the block does not meet packs as before (see changed):
        only the columns it meets go stale (issue 26: a re-pack is the costly
        part at thousands of GPUs). By class, Hall's counts see every free
        GPU: the whole run does."""
        if self.holder is None:
            if self.fp[start:end, first:first + k].any():
                self.touch(start, end)
        else:
            # (L,) the first service on the block
            self._redo_from(start, end, self.holder[start:end, first:first + k].min(1))
        self.changed(start, end, first, k)

    def refresh(self, t: int) -> None:
        """Re-pack the stale footprint columns from t on (those before t are
        past: dropped)."""
        if not self.any_stale:
            return
        cols = t + np.nonzero(self.stale[t:])[0]  # (C,) ascending
        redo = self.redo[cols]  # (C,)
        self.stale[:] = False
        self.redo[:] = len(self.elastic)
        self.any_stale = False
        if not len(cols):
            return
        if self.elastic and self.demand_aware:
            free = ~self.hard.busy[cols]  # (C, G)
            if self.holder is None:
                self.served[:, cols] = self.pack(free, cols)
            else:
                self.served[:, cols], self.holder[cols] = self.repack(free, cols, redo)
            self.used[cols] = self.gpus @ self.served[:, cols]
            self.fp[cols] = ~self.hard.busy[cols] & ~free
        self.avoid[cols] = self.hard.busy[cols] | self.fp[cols]
        kb.settle_columns(self.avoid, self.run, t, int(cols[-1]) + 1, int(cols[0]))
        self.version += 1

    def pack(self, free: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """(E, C) replicas served (rows in the order of service) when the
        demand of the columns `cols` (C,) is packed, in the packing order, into
        `free` (C, G) bool, which is updated."""
        need = self.need[self.el[:, None], cols[None, :]]  # (E, C)
        return serve(self.lay, free, None, self.elastic, need, True, self.subsets, self.order)

    def repack(self, free: np.ndarray, cols: np.ndarray, redo: np.ndarray):
        """Packed by priority only: ((E, C) served, (C, G) holder) when the
        columns `cols` (C,) are re-packed into `free` (C, G), which is
        updated, from the service at position redo[c] on; those before it keep
        their GPUs (none of which `free` may have lost)."""
        E = len(self.elastic)
        holder = self.holder[cols]  # (C, G)
        kept = holder < redo[:, None]  # cells of the services before
        free &= ~kept
        holder[~kept] = E
        lay, el = self.lay, self.el
        new = np.zeros((E, len(cols)), dtype=np.int64)
        # Labelled by position: the fill writes the holder directly.
        fill(free, holder, self.positions, self.need[el[:, None], cols[None, :]], self.gpus,
             lay.pool_ok[el], lay.node_first, lay.node_end, lay.node_pool, lay.pool_gpn,
             lay.pool_nodes, True, new, lay.gpu_node, redo)
        before = self.positions[:, None] < redo[None, :]  # (E, C)
        return np.where(before, self.served[:, cols], new), holder

    def loss(self, t: int, end: int, k: int, cand: np.ndarray,
             until_free: bool = False) -> np.ndarray:
        """(C,) float64: priority-weighted elastic service lost over [t, end)
        if a block of k GPUs at each first GPU of cand turns hard, the demand
        re-packed without it. `until_free`: the candidates after the first
        that loses nothing are not priced (inf)."""
        self.repacks += 1
        w = self.weight
        base = float((w[:, None] * self.served[:, t:end]).sum())
        out = np.zeros(len(cand), dtype=np.float64)
        every = np.arange(t, end)
        for i, g in enumerate(cand.tolist()):
            # Packed by priority only, the columns where the footprint does not
            # use the block pack as they are (see placed): only the others are
            # re-packed, from the first service on the block; the sum below is
            # over the same (E, L) grid either way.
            served = self.served[:, t:end].copy()  # (E, L)
            if self.holder is None:
                free = ~self.hard.busy[every]  # (L, G)
                free[:, g:g + k] = False
                served[:] = self.pack(free, every)
            else:
                users = self.holder[t:end, g:g + k].min(1)  # (L,)
                at = np.nonzero(users < len(self.elastic))[0]  # (C,)
                if len(at):
                    free = ~self.hard.busy[t + at]  # (C, G)
                    free[:, g:g + k] = False
                    served[:, at] = self.repack(free, t + at, users[at].astype(np.int64))[0]
            out[i] = max(base - float((w[:, None] * served).sum()), 0.0)
            if until_free and out[i] <= EPS:
                out[i + 1:] = np.inf
                break
        return out


@njit(cache=True)
def _first_reaching(holder, served, need, may_use, gpu_node, top, out):
    """Per column c of holder (L, G) (service positions, E: none): the first
    service that may use the block's pool (may_use (E,)), wants replicas
    (need (E, L)) and either is short (served < need) or took a GPU on a
    node at or below `top` (its scan reached the block's top node); E if
    none. out: (L,)."""
    L, G = holder.shape
    E = may_use.shape[0]
    low = np.empty(E, dtype=np.int64)  # each service's lowest GPU taken
    for c in range(L):
        low[:] = G
        for g in range(G):
            h = holder[c, g]
            if h < E and low[h] == G:
                low[h] = g
        out[c] = E
        for e in range(E):
            if not may_use[e] or need[e, c] == 0:
                continue
            if served[e, c] < need[e, c] or gpu_node[low[e]] <= top:
                out[c] = e
                break


EPS = kb.EPS


def worth_displacing(net: float, later) -> bool:
    """The displacement rule: a rigid start that pushes out real-time demand is
    taken when its value net of the service it displaces (`net`) is positive
    and beats `later`, the job's value at its earliest start that displaces
    nothing (0 when it has none; a function is called only when needed)."""
    return net > EPS and net > (later() if callable(later) else later) + EPS
