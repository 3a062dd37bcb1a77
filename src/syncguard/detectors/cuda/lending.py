"""Taking the one CUPTI subscription, giving it back, and lending it to a starting profiler.

The hub (:class:`syncguard.detectors.cuda.hub.CuptiHub`) mixes :class:`Lending` in; it needs the
hub's ``lock``, ``regions``, ``fast``, ``activity``, ``hostmem``, ``generation``, ``subscribed``,
``handed``, ``hand_overs``, ``shared``, ``weaker`` and the ``CuptiCalls`` switches. A profiler's
start and stop reach :meth:`Lending.hand_over` and :meth:`Lending.take_back` through the
wrappers :func:`wrap_profiler` puts on torch's profiler functions.
"""
from __future__ import annotations

import contextlib
import os
import sys

from syncguard.attribution.frames import user_site
from syncguard.detectors import routing
from syncguard.detectors.cuda import cupti as C
from syncguard.detectors.cuda import neighbours
from syncguard.detectors.seam import DetectorUnavailable

#: how long a hand-over waits for callbacks still running before it unsubscribes anyway
DRAIN_S = 2.0


class Lending:
    """The subscription's life: taken at a first region, given back, lent to a profiler."""

    # -- the subscription ---------------------------------------------------------------------------
    def _take(self) -> None:
        """Subscribe, or raise DetectorUnavailable with the reason (:attr:`weaker` after a hand-over)."""
        if self.handed:
            raise DetectorUnavailable(self.weaker or "CUPTI is lent to a profiler")
        try:
            self._subscribe()
        except DetectorUnavailable as e:
            if self.hand_overs:  # lent before: whoever took it kept it
                self.weaker = f"CUPTI not taken back after torch.profiler ({e}); {kept_remedy()}"
                raise DetectorUnavailable(self.weaker) from None
            self.weaker = str(e)  # another client (a profiler before any region) holds it
            raise
        self.weaker = None

    def _subscribe(self) -> None:
        self.generation += 1  # per-thread call depth from before is stale
        if self.fast is not None:  # activity records are per copy: no run of copies folded then
            self.fast.folding(self.hostmem == "pointer")
        try:
            code = self._on(True)
        except BaseException as e:
            raise DetectorUnavailable(str(e)) from None
        if code != C.SUCCESS:
            raise DetectorUnavailable(neighbours.refused(self.lib.error_name(code)))
        self.subscribed, self.closing, self._ids_on = True, False, True
        self._with = self.fast  # the callback subscribed: the C module, or None (Python)
        if not self._saved_profiler:
            try:
                self._saved_profiler = wrap_profiler(self.hand_over, self.take_back,
                                                     self._profiler_wrappers)
            except BaseException as e:
                self._give_back()
                raise DetectorUnavailable(str(e)) from None

    def _give_back(self) -> bool:
        drained = self._switch_off_and_unsubscribe()
        self.subscribed = self._ids_on = False
        self.generation += 1
        return drained

    # -- a profiler wants CUPTI ---------------------------------------------------------------------
    def hand_over(self, site=None, who: str = "torch.profiler") -> None:
        """Lend CUPTI to a profiler starting now (``who``, named in the reason); regions open go
        on with sync-debug mode."""
        with self.lock:
            if self.handed or self.shared:  # shared: the profiler subscribes beside us
                return
            self.handed = True
            if not self.subscribed:
                return
            self.hand_overs += 1
            if self.activity.on:
                self.activity.flush()
                for r in self.regions:
                    r.state.setdefault("cuda_records", {}).update(self.activity.records)
            drained = self._give_back()
            where = f"{site.filename}:{site.lineno}" if site is not None and site.filename else "an unknown line"
            self.weaker = (f"{who} started at {where} and took CUPTI (one subscriber per "
                           "process before CUPTI 13.2)")
            if not drained:
                self.weaker += f"; callbacks still ran after {DRAIN_S} s and were not waited for"
            if self.regions:
                from syncguard.detectors.hooks import HUBS
                HUBS.debug.arm(routing.deliver)
                self._debug = True
            for r in self.regions:
                r.report.notes.append(f"{self.weaker}; from then on only stream syncs flagged by "
                                      "sync-debug mode were seen (detector 'debug')")
                r.state["cuda_yielded"] = len(r.observations)  # cuda's calls kept until then
                self._route(r.state.pop("cuda_thread", 0), -1)

    def take_back(self) -> None:
        """The profiler stopped: subscribe again, now if no region is open, else at the next
        region's entry (the regions open watch with sync-debug mode until they end)."""
        with self.lock:
            if not self.handed:
                return
            self.handed = False
            if self.regions:
                return
            try:
                self._take()
            except DetectorUnavailable:
                pass  # weaker says why; each later region tries again

    @contextlib.contextmanager
    def lent(self, site=None, who: str = "torch.profiler"):
        """CUPTI lent out for the block, as to a profiler (``who``: another CUPTI client, such as
        cupti.api_census): regions entered inside run without the cuda detector (``weaker``
        says why); taken back at the end where it can be."""
        self.hand_over(site if site is not None else user_site(), who)
        try:
            yield self
        finally:
            self.take_back()


def kept_remedy(environ=os.environ) -> str:
    """What a region that could not take CUPTI back after a profiler says of Kineto, and what the
    user can do: with ``TEARDOWN_CUPTI=1`` Kineto lets CUPTI go after its trace (at a later CUDA
    call, so a later region's retry takes it back). syncguard never sets it: torch.compile sets
    it to 0 with CUDA graphs, whose capture the teardown crashes, and setting it would change
    the user's program."""
    if environ.get("TEARDOWN_CUPTI") == "1":
        return ("TEARDOWN_CUPTI=1 is set: Kineto lets CUPTI go after a trace, at a later CUDA "
                "call, and a later region takes it back")
    return ("Kineto keeps CUPTI after a trace; set TEARDOWN_CUPTI=1 (not with CUDA graphs) to "
            "let regions take it back")


def wrap_profiler(hand_over, take_back, wrappers: dict | None = None) -> list:
    """Call ``hand_over(site)`` just before torch's profiler prepares or starts (where Kineto
    subscribes CUPTI) and ``take_back()`` just after it stops; returns what to restore.
    ``wrappers``: torch's function -> its wrapper, kept by the caller so that a wrapper is built
    once. A hook that fails is swallowed: the user's profiler runs as without syncguard."""
    ap = sys.modules.get("torch.autograd.profiler")  # the module as torch imported it
    if ap is None:
        try:
            import torch.autograd.profiler as ap
        except ImportError:
            return []
    saved: list = []
    try:
        for attr, hook, before in (("_prepare_profiler", hand_over, True),
                                   ("_enable_profiler", hand_over, True),
                                   ("_disable_profiler", take_back, False)):
            original = getattr(ap, attr, None)
            if original is None:
                continue
            wrapper = wrappers.get(original) if wrappers is not None else None
            if wrapper is None:
                wrapper = _wrapper(original, hook, before)
                if wrappers is not None:
                    wrappers[original] = wrapper
            saved.append((ap, attr, original))
            setattr(ap, attr, wrapper)
    except BaseException:
        unwrap(saved)
        raise
    return saved


def _wrapper(original, hook, before: bool):
    if before:
        def start_profiler(*args, **kwargs):
            try:
                hook(user_site())
            except Exception:
                pass
            return original(*args, **kwargs)
        wrapper = start_profiler
    else:
        def stop_profiler(*args, **kwargs):
            try:
                return original(*args, **kwargs)
            finally:
                try:
                    hook()
                except Exception:
                    pass
        wrapper = stop_profiler
    wrapper.__wrapped__ = original
    return wrapper


def unwrap(saved: list) -> None:
    for owner, attr, original in reversed(saved):
        setattr(owner, attr, original)
    saved.clear()
