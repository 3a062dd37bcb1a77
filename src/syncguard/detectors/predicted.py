"""Detector ``predict``: syncs *predicted* on a machine without a GPU (:mod:`syncguard.predict`).

Why a detector: a predicted sync then travels as a measured one does (routed to the regions of
the thread that made it, classified by ``allow()``, judged by the region, phases included), and
one piece of code, the region, decides. What differs is said on every event: ``detectors`` is
``("predict",)`` and the note names the measured torch whose rules predicted it. Calls the
predictor cannot model are kept on the region's report as "not predicted (why)", never clean.

Inside an open session block (the plugin's ``--syncguard-predict`` opens ``predicting()`` before
collection, so that tests see ``torch.cuda.is_available()``) a region is a ``predicted()`` block;
alone (``syncguard.audit(predict=True)``) it opens its own ``predicting()`` block, so CUDA code
runs on CPU stand-ins inside it only.
"""
from __future__ import annotations

import dataclasses
import threading

from syncguard.detectors import routing
from syncguard.attribution.frames import Site
from syncguard.records.events import SyncEvent


#: the predictor's note per predicted site (the rules' torch version and evidence), read back when
#: a region turns its observations into events; small (one entry per distinct site)
NOTES: dict[tuple, str | None] = {}


def label(event) -> str:
    """"predicted " for a sync (event or per-site record) this detector predicted, else "":
    the one label every view (failure table, summary, matrix) puts before its kind."""
    return "predicted " if "predict" in (getattr(event, "detectors", None) or ()) else ""


class Predict:
    name, order, lasting = "predict", 0, False

    def unavailable(self) -> str | None:
        return None

    def arm(self, region) -> None:
        from syncguard import predict

        def deliver(event: SyncEvent) -> None:
            NOTES[(event.filename, event.lineno, event.api, event.op)] = event.note
            routing.deliver(routing.Observation(
                self.name, Site(event.filename, event.lineno, event.function, event.stack),
                threading.current_thread().name, api=event.api, kind=event.kind, op=event.op))

        block = (predict.predicted if predict.session_active() else predict.predicting)
        cm = block(on_event=deliver)
        region.state["prediction"] = cm.__enter__()
        region.state["predict_cm"] = cm

    def disarm(self, region) -> None:
        cm = region.state.pop("predict_cm", None)
        if cm is not None:
            cm.__exit__(None, None, None)

    def finish(self, region, found: list) -> list:
        from syncguard.detectors.torch_hooks import event

        prediction = region.state.get("prediction")
        out = list(found)
        for o in region.observations:
            if o.source == self.name:
                note = NOTES.get((o.site.filename, o.site.lineno, o.api, o.op), "predicted")
                out.append((dataclasses.replace(event(o, o.api, o.kind, (self.name,)), note=note),
                            o.allows, o.marker))
        if prediction is not None:
            region.report.not_predicted.extend(str(u) for u in prediction.unmodelled)
            region.report.notes.append(
                f"predicted on a CPU with rules measured on a GPU, for torch {prediction.target}")
        return out
