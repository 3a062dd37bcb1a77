"""syncguard.predict on a CPU build: CUDA code runs unchanged, syncs are predicted at the user's
line. Expected kinds come from the committed H200 corpus runs (reports/gpu/), never from the
predictor's own table; plumbing checks (labels, restoring torch.cuda) use torch's semantics."""
from __future__ import annotations

import inspect
import os
import threading

import pytest
import torch

from syncguard.records.events import SyncError
from syncguard.predict import CudaStandIn, predicting
from rulelearn.derive import measured_kinds
from syncguard.predict.rules import RuleTable, load_rules

from overlap import overlapping

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def measured(version: str, snippet: str) -> list[str]:
    """Kinds the committed H200 run's ground truth measured for a corpus snippet."""
    return measured_kinds(ROOT, version, f"corpus/{snippet}")


def here() -> int:
    return inspect.currentframe().f_back.f_lineno


def test_cuda_code_runs_unchanged_and_computes_like_the_cpu():
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(64, generator=g)
    with predicting() as p:
        x = torch.randn(64, generator=torch.Generator(device="cuda").manual_seed(0),
                        device="cuda")
        assert x.is_cuda and x.device == torch.device("cuda", 0) and x.device.type == "cuda"
        assert torch.cuda.is_available() and torch.cuda.device_count() == 1
        y = (x * 2 + 1).relu_()
        assert isinstance(y, CudaStandIn) and y.is_cuda
        out = y.add_(1)
        assert out is y  # in-place ops return self, as on a GPU
        z = torch.zeros(3, device=x.device)
        assert z.is_cuda
        host = y.to("cpu", non_blocking=False)
        assert not isinstance(host, CudaStandIn) and host.device.type == "cpu"
    assert torch.equal(host, (ref * 2 + 1).relu() + 1)
    assert not p.unmodelled, p.format()


def test_item_is_predicted_at_the_users_line_with_the_measured_kind():
    with predicting("2.15.0") as p:
        x = torch.randn(16, device="cuda")
        line = here() + 1
        x.sum().item()
    assert sorted(e.kind for e in p.syncs) == measured("2.14.1", "item")
    (e,) = p.syncs
    assert e.filename == __file__ and e.lineno == line and e.function.startswith("test_item")
    assert e.detectors == ("predict",) and e.thread == threading.current_thread().name
    assert "rules of torch 2.14.1" in e.note  # nearest measured version to 2.15.0
    report = p.to_report()
    assert report.detectors == ("predict",) and report.syncs == [e]


def test_the_cpu_mask_boundary_follows_the_measured_versions():
    """torch 2.8.0 measured a copy and wait for ``x[cpu_mask] = v``; 2.11.0 measured none."""
    for version, kinds in (("2.8.0", measured("2.8.0", "assign_with_cpu_mask")),
                           ("2.11.0", measured("2.11.0", "assign_with_cpu_mask"))):
        with predicting(version) as p:
            emb = torch.randn(8, 4, device="cuda")
            mask = torch.tensor([True, False] * 4)
            emb[mask] = torch.ones(4, 4, device="cuda")
        assert sorted(e.kind for e in p.syncs) == kinds, (version, p.format())
    assert measured("2.8.0", "assign_with_cpu_mask") and not measured("2.11.0", "assign_with_cpu_mask")


def test_host_memory_and_non_blocking_decide_a_copy():
    with predicting("2.14.1") as p:
        pinned = torch.randn(8).pin_memory()
        assert pinned.is_pinned() and not torch.randn(8).is_pinned()
        pinned.to("cuda", non_blocking=True)
        line = here() + 1
        torch.randn(8).to("cuda", non_blocking=True)
    assert [(e.kind, e.lineno) for e in p.syncs] == [
        (k, line) for k in measured("2.14.1", "to_cuda_pageable_non_blocking")]
    assert measured("2.14.1", "pinned_to_cuda_non_blocking") == []


def test_streams_events_and_synchronize_are_predicted():
    with predicting("2.14.1") as p:
        s, ev = torch.cuda.Stream(), torch.cuda.Event()
        with torch.cuda.stream(s):
            torch.ones(2, device="cuda") * 2
        ev.record()
        ev.synchronize()
        s.synchronize()
        torch.cuda.synchronize()
    assert [e.kind for e in p.syncs] == (measured("2.14.1", "event_synchronize")
                                         + measured("2.14.1", "stream_synchronize")
                                         + measured("2.14.1", "cuda_synchronize"))


def test_what_cannot_be_modelled_is_reported_never_clean():
    """unique along a dimension (its output shape read from the data) was never measured by a
    committed run."""
    with predicting() as p:
        x = torch.randn(4, 3, device="cuda")
        torch.unique(x, dim=0)
    assert p.unmodelled and not p.clean
    assert "aten::unique_dim[]" in p.unmodelled[0].why
    assert "not predicted" in p.to_report().reason


def test_a_standin_used_on_another_thread_is_not_predicted():
    with predicting() as p:
        x = torch.randn(8, device="cuda")
        t = threading.Thread(target=lambda: x.sum())
        t.start()
        t.join()
    assert any("outside the predicting thread" in u.why for u in p.unmodelled)


def test_numpy_of_a_cuda_tensor_raises_as_on_a_gpu():
    with predicting():
        x = torch.randn(2, device="cuda")
        with pytest.raises(TypeError, match="can't convert cuda:0 device type tensor to numpy"):
            x.numpy()


def test_torch_cuda_is_restored_on_every_exit():
    before = {n: getattr(torch.cuda, n) for n in ("is_available", "synchronize", "Stream",
                                                  "Event", "current_stream", "empty_cache")}
    gen = torch.Generator
    with pytest.raises(ZeroDivisionError):
        with predicting():
            assert torch.cuda.is_available()
            1 / 0
    assert {n: getattr(torch.cuda, n) for n in before} == before
    assert torch.Generator is gen and torch.cuda.is_available() is False


def test_raise_if_syncs_fails_only_on_predicted_syncs():
    with predicting() as p:
        torch.randn(4, device="cuda").cumsum(0)
    p.raise_if_syncs()  # measured clean (corpus: cumsum)
    with predicting() as p:
        torch.randn(4, device="cuda").nonzero()
    with pytest.raises(SyncError, match="predicted blocking_copy_d2h"):
        p.raise_if_syncs()


def test_bad_rules_are_one_line_errors(tmp_path):
    bad = tmp_path / "rules.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_rules(str(bad))
    with pytest.raises(ValueError, match="not a syncguard predict rules table"):
        RuleTable.from_dict({"kind": "other"})
    with pytest.raises(ValueError, match="no predict rules table"):
        load_rules(str(tmp_path / "missing.json"))


def _table(rules) -> dict:
    return {"kind": "syncguard-predict-rules", "schema_version": 1, "rules": rules}


_GOOD = {"op": "aten::nonzero", "facts": {}, "torch": {"2.13.0": {"syncs": [
    {"kind": "blocking_copy_d2h", "api": "nonzero", "via": None}]}}}


@pytest.mark.parametrize("data, field", [
    ({"aten::nonzero[]": {"torch": {}}}, r"rules\['aten::nonzero\[\]'\]\['torch'\]"),
    ({"aten::nonzero[]": {"op": "aten::nonzero"}}, r"\['torch'\] must be"),
    ({"aten::nonzero[]": {"torch": {"2.13.0": {"evidence": []}}}},
     r"\['torch'\]\['2.13.0'\]\['syncs'\] is missing"),
    ({"aten::nonzero[]": {"torch": {"2.13.0": {"syncs": [{"api": "x"}]}}}},
     r"\['syncs'\]\[0\]"),
    ({"aten::nonzero[]": {"torch": {"two": {"syncs": []}}}}, "is not a torch version"),
    ({"aten::nonzero[]": 3}, "must be an object"),
    ([1, 2], "'rules' must be a JSON object, not list"),
])
def test_a_malformed_rules_table_fails_at_load_naming_the_field(tmp_path, data, field):
    """Found by a helper: a table of the wrong shape loaded silently and failed at the user's
    first op with a KeyError/TypeError; now load says which field is wrong, in one line."""
    import json
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(_table(data)))
    with pytest.raises(ValueError, match=field) as e:
        load_rules(str(path))
    assert str(path) in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ValueError, match=field):
        with predicting(rules=str(path)):
            pass
    RuleTable.from_dict(_table({"aten::nonzero[]": _GOOD}))  # the well-formed one loads


def test_rules_that_are_a_folder_or_not_a_path_are_named_errors(tmp_path):
    with pytest.raises(ValueError, match="is a folder"):
        load_rules(str(tmp_path))
    with pytest.raises(ValueError, match="is a folder"):
        with predicting(rules=str(tmp_path)):
            pass
    with pytest.raises(TypeError, match="rules must be a RuleTable or a path.*not int"):
        with predicting(rules=42):
            pass


def test_a_module_moved_to_cuda_trains_and_its_syncs_are_predicted():
    swap = torch.__future__.get_swap_module_params_on_conversion()
    torch.manual_seed(0)
    with predicting("2.14.1") as p:
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                    torch.nn.Linear(16, 2)).cuda()
        assert all(q.is_cuda and isinstance(q, torch.nn.Parameter) for q in model.parameters())
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(4, 8, device="cuda")
        y = torch.randint(0, 2, (4,), device="cuda")
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        line = here() + 1
        loss.item()
    assert torch.__future__.get_swap_module_params_on_conversion() == swap
    # four pageable parameters uploaded by blocking copies, then the loss read back
    uploads = [e.kind for e in p.syncs if e.lineno != line]
    assert uploads == measured("2.14.1", "to_cuda_pageable_blocking") * 4
    assert [e.kind for e in p.syncs if e.lineno == line] == measured("2.14.1", "item")
    assert not p.unmodelled, p.format()


def test_module_cuda_after_the_optimizer_is_built_keeps_the_parameters_it_trains():
    """Found by a reviewer: Module.cuda() gave the module new Parameter objects, so an optimizer
    built before the move stepped the old ones and the model never changed. On a GPU,
    ``module.cuda()`` keeps each Parameter object (torch's ``Module._apply`` sets ``.data``)."""
    torch.manual_seed(0)
    with predicting() as p:
        model = torch.nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        held = list(opt.param_groups[0]["params"])
        before = [q.detach().clone() for q in model.parameters()]
        model.cuda()
        assert all(q.is_cuda and isinstance(q, torch.nn.Parameter) for q in model.parameters())
        model(torch.randn(3, 4, device="cuda")).sum().backward()
        opt.step()
        assert [q is h for q, h in zip(model.parameters(), held)] == [True, True]
        after = [q.detach().cpu() for q in model.parameters()]
    assert all(not torch.equal(b, a) for b, a in zip(before, after))
    assert not p.unmodelled, p.format()


def _convert_while_a_graph_holds_the_parameters() -> tuple[str, torch.dtype, float]:
    """A CPU module converted to double between its forward and its backward, as torch allows:
    ``Module._apply`` sets ``.data``, and the graph keeps the float tensors it saved."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    x = torch.randn(4, 3)
    loss = model(x).square().sum()
    try:
        model.double()
    except RuntimeError as e:
        return f"{type(e).__name__}: {e}", model.weight.dtype, 0.0
    loss.backward()
    return "converted", model.weight.dtype, float(loss)


def test_a_cpu_module_converted_while_a_graph_holds_it_behaves_as_without_syncguard():
    """Found by a reviewer: the shim turned on torch's process-wide swap setting for every
    ``Module._apply`` in a block, so ``m.double()`` on a CPU module whose parameters a graph still
    held raised "_apply(): Couldn't swap Linear.weight" where torch converts it. Only a
    conversion into stand-ins needs the swap (``Module.cuda()`` keeping each Parameter)."""
    bare = _convert_while_a_graph_holds_the_parameters()
    assert bare[:2] == ("converted", torch.float64)  # torch's own behaviour, without syncguard
    with predicting():
        inside = _convert_while_a_graph_holds_the_parameters()
    assert inside == bare


def test_torch_save_of_standins_predicts_a_copy_to_the_host_per_storage_and_loads():
    """Found by a reviewer: torch.save of stand-ins was predicted clean and the file did not
    load. On a GPU, torch.save copies each CUDA storage to pageable host memory (a blocking
    aten::copy_, as in the measured copy_to_pageable_blocking snippet), once per storage (a view
    shares its base's), and files it under cuda:0, which a CPU machine loads with
    map_location="cpu"."""
    import io

    data = torch.arange(4.0)
    with predicting("2.14.1") as p:
        model = torch.nn.Linear(3, 2).cuda()
        weight = model.weight.detach().cpu()
        x = data.to("cuda")
        before = len(p.syncs)
        checkpoint, whole = io.BytesIO(), io.BytesIO()
        torch.save({"x": x, "view": x[1:], "model": model.state_dict()}, checkpoint)
        torch.save(model, whole)
        saves = [e.kind for e in p.syncs[before:]]
    assert saves == measured("2.14.1", "copy_to_pageable_blocking") * 5  # 3 storages, then 2
    assert not p.unmodelled, p.format()
    checkpoint.seek(0)
    loaded = torch.load(checkpoint, map_location="cpu")
    assert torch.equal(loaded["x"], data) and torch.equal(loaded["view"], data[1:])
    assert torch.equal(loaded["model"]["weight"], weight)
    whole.seek(0)
    again = torch.load(whole, map_location="cpu", weights_only=False)
    assert isinstance(again.weight, torch.nn.Parameter) and torch.equal(again.weight, weight)
    if not torch.cuda.is_available():  # filed under CUDA, as a GPU's file is
        checkpoint.seek(0)
        with pytest.raises(RuntimeError, match="deserialize object on a CUDA device"):
            torch.load(checkpoint)


#: what the checkpoint below holds: one storage shared by "x" and "view", the Linear's weight
#: and bias, and one host tensor; a GPU restores each CUDA storage onto the device once
LOAD_UPLOADS = 3


def test_torch_load_of_cuda_storages_inside_a_block_gives_standins_and_predicts_the_uploads():
    """Found by a reviewer: torch.load without map_location inside a block failed ("Storage
    device not recognized: cuda") for a file holding CUDA tensors. On a GPU (the H200 run:
    "save/load of a CUDA tensor -> device(type='cuda', index=0)" for 2.8.0, 2.11.0, 2.14.1),
    torch.load restores each storage filed under cuda:0 onto cuda:0, uploading it from the
    pageable host memory it was read into by a blocking copy, once per storage however many
    tensors share it (the measured to_cuda_pageable_blocking upload); Parameters stay
    Parameters. map_location="cpu" gives host tensors with no copy, and cuda:1 raises what torch
    raises on a one-GPU machine; outside the block, torch's own behaviour is unchanged."""
    import io

    data = torch.arange(4.0)
    with predicting("2.14.1") as p:
        model = torch.nn.Linear(3, 2).cuda()
        weight = model.weight.detach().cpu()
        x = data.to("cuda")
        checkpoint, whole = io.BytesIO(), io.BytesIO()
        torch.save({"x": x, "view": x[1:], "model": model.state_dict(), "host": data},
                   checkpoint)
        torch.save(model, whole)
        checkpoint.seek(0)
        before = len(p.syncs)
        loaded = torch.load(checkpoint)
        uploads = [e.kind for e in p.syncs[before:]]
        devices = {k: str(t.device) for k, t in
                   [("x", loaded["x"]), ("view", loaded["view"]), ("host", loaded["host"]),
                    *loaded["model"].items()]}
        assert torch.equal(loaded["x"].cpu(), data) and torch.equal(loaded["view"].cpu(),
                                                                    data[1:])
        assert torch.equal(loaded["model"]["weight"].cpu(), weight)
        loaded["x"].mul_(2)  # the view shares the storage on the device, as on a GPU
        assert loaded["view"].cpu().tolist() == [2.0, 4.0, 6.0]
        whole.seek(0)
        again = torch.load(whole, weights_only=False)
        param = again.weight
        for location in ("cuda", "cuda:0", torch.device("cuda")):
            checkpoint.seek(0)
            assert torch.load(checkpoint, map_location=location)["host"].is_cuda
        checkpoint.seek(0)
        before = len(p.syncs)
        on_host = torch.load(checkpoint, map_location="cpu")
        host_copies = len(p.syncs) - before
        checkpoint.seek(0)
        with pytest.raises(RuntimeError, match="CUDA device 1 but torch.cuda.device_count"):
            torch.load(checkpoint, map_location="cuda:1")
    assert uploads == measured("2.14.1", "to_cuda_pageable_blocking") * LOAD_UPLOADS
    assert devices == {"x": "cuda:0", "view": "cuda:0", "host": "cpu", "weight": "cuda:0",
                       "bias": "cuda:0"}
    assert isinstance(loaded["x"], CudaStandIn) and not isinstance(loaded["host"], CudaStandIn)
    assert isinstance(param, torch.nn.Parameter) and param.is_cuda and param.requires_grad
    assert type(on_host["x"]) is torch.Tensor and on_host["x"].device.type == "cpu"
    assert torch.equal(on_host["x"], data) and host_copies == 0
    assert not p.unmodelled, p.format()
    checkpoint.seek(0)
    outside = torch.load(checkpoint, map_location="cpu")
    assert type(outside["x"]) is torch.Tensor and torch.equal(outside["x"], data)
    if not torch.cuda.is_available():  # outside a block, torch's own answer on a CPU build
        checkpoint.seek(0)
        with pytest.raises(RuntimeError, match="deserialize object on a CUDA device"):
            torch.load(checkpoint)


def test_torch_load_with_a_map_location_that_calls_storage_cuda_gives_standins():
    """Found by a reviewer: the old checkpoint idiom ``map_location=lambda s, loc: s.cuda()``
    raised inside a block on a CPU build ("Torch not compiled with CUDA enabled"). On a GPU,
    ``UntypedStorage.cuda()`` copies the storage torch.load read into pageable host memory to
    the device, a blocking upload per storage, the host tensor's storage included (the callable
    decides every storage: the H200 runs of ``tools/probe_device_apis.py``, "storage.cuda() in
    map_location", put both on cuda:0); ``.cuda(0)`` of a storage already there copies it on the
    device, which waits for nothing, and is a new storage ("storage.cuda().cuda(0) is itself ->
    False"), and ``.cuda(1)`` fails on a one-GPU machine as selecting that device fails
    ("storage.cuda(1) in map_location": "CUDA error: invalid device ordinal"). Outside the
    block, torch's own behaviour."""
    import io

    data = torch.arange(4.0)
    host_only = io.BytesIO()
    torch.save({"host": data}, host_only)
    without_syncguard = _load_moving_storages(host_only)
    with predicting("2.14.1") as p:
        x = data.to("cuda")
        checkpoint = io.BytesIO()
        torch.save({"x": x, "view": x[1:], "model": torch.nn.Linear(3, 2).cuda().state_dict(),
                    "host": data}, checkpoint)
        checkpoint.seek(0)
        before = len(p.syncs)
        loaded = torch.load(checkpoint, map_location=lambda storage, loc: storage.cuda())
        uploads = [e.kind for e in p.syncs[before:]]
        devices = {k: str(t.device) for k, t in
                   [("x", loaded["x"]), ("view", loaded["view"]), ("host", loaded["host"]),
                    *loaded["model"].items()]}
        values = (loaded["x"].cpu().tolist(), loaded["view"].cpu().tolist(),
                  loaded["host"].cpu().tolist())
        checkpoint.seek(0)
        before = len(p.syncs)
        twice = torch.load(checkpoint, map_location=lambda storage, loc: storage.cuda().cuda(0))
        again = len(p.syncs) - before
        moved = torch.ones(2).untyped_storage().cuda()
        moved_again_is_itself = moved.cuda(0) is moved
        checkpoint.seek(0)
        with pytest.raises(RuntimeError, match="invalid device ordinal"):
            torch.load(checkpoint, map_location=lambda storage, loc: storage.cuda(1))
    assert uploads == measured("2.14.1", "to_cuda_pageable_blocking") * (LOAD_UPLOADS + 1)
    assert devices == {"x": "cuda:0", "view": "cuda:0", "host": "cuda:0", "weight": "cuda:0",
                       "bias": "cuda:0"}
    assert values == ([0.0, 1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [0.0, 1.0, 2.0, 3.0])
    assert again == LOAD_UPLOADS + 1 and all(isinstance(t, CudaStandIn) for t in
                                             (twice["x"], twice["host"]))
    assert not moved_again_is_itself
    assert not p.unmodelled, p.format()
    assert _load_moving_storages(host_only) == without_syncguard


def _load_moving_storages(checkpoint) -> str:
    """What ``torch.load`` with ``storage.cuda()`` in ``map_location`` gives, or raises."""
    checkpoint.seek(0)
    try:
        loaded = torch.load(checkpoint, map_location=lambda storage, loc: storage.cuda())
    except Exception as e:  # noqa: BLE001 - the outcome is what is compared
        return f"{type(e).__name__}: {e}"
    return str({k: str(v.device) for k, v in loaded.items() if isinstance(v, torch.Tensor)})


def test_region_report_is_a_labelled_report():
    from syncguard.predict import region_report

    def work():
        torch.randn(8, device="cuda").nonzero()

    report = region_report(work, torch_version="2.14.1")
    assert [e.kind for e in report.syncs] == measured("2.14.1", "nonzero")
    assert report.detectors == ("predict",) and "predicted on a CPU" in report.notes[0]


def test_a_prediction_leaves_the_inductor_cache_variable_as_it_found_it():
    """Found dropping the plugin into another suite: a function mode's first import of
    torch._dynamo sets TORCHINDUCTOR_CACHE_DIR, and every subprocess started later inherited it.
    In a fresh interpreter, where torch._dynamo is not imported yet."""
    import subprocess
    import sys
    code = ("import os, torch\n"
            "from syncguard.predict import predicting\n"
            "assert 'TORCHINDUCTOR_CACHE_DIR' not in os.environ\n"
            "with predicting():\n"
            "    (torch.ones(2, device='cuda') * 2).sum()\n"
            "print('TORCHINDUCTOR_CACHE_DIR' in os.environ)\n")
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in env.get("PYTHONPATH", "").split(
        os.pathsep) if p])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True).stdout
    assert out.strip() == "False"


def test_overlapping_blocks_on_two_threads_keep_module_cuda_working_and_restore_the_flag():
    """Found by a helper: the torch.__future__ flag that Module.cuda() needed inside a block
    (then overwrite_module_params_on_conversion, later swap_module_params_on_conversion; now
    ``Module._apply``'s subclass question, swapped with the shim's names) was saved and put back
    per block while the torch.cuda swap is shared, so when thread A's block closed while thread
    B's was open, B's Module.cuda() left the weights on the CPU, and after both closed the flag
    stayed True. Events force A open, B open, A close, B uses, B close."""
    import torch.nn.modules.module as module

    before = torch.__future__.get_swap_module_params_on_conversion()
    asked = module.is_traceable_wrapper_subclass
    device = overlapping(predicting, lambda: torch.nn.Linear(2, 2).cuda().weight.device)
    assert device.type == "cuda"
    assert torch.__future__.get_swap_module_params_on_conversion() == before
    assert module.is_traceable_wrapper_subclass is asked


@pytest.mark.parametrize("op", ["x + c", "torch.mm(c, x)", "c.add_(x)", "Linear(4, 2)(c)"])
def test_mixing_a_cpu_tensor_with_a_standin_raises_as_on_a_gpu(op):
    """Found by a helper: an op mixing a host tensor (dim > 0) with a CUDA stand-in computed a
    result on the CPU, where a GPU raises torch's device-mismatch error."""
    with predicting():
        c = torch.randn(4, 4, device="cuda")
        x = torch.randn(4, 4)
        run = {"x + c": lambda: x + c, "torch.mm(c, x)": lambda: torch.mm(c, x),
               "c.add_(x)": lambda: c.add_(x),
               "Linear(4, 2)(c)": lambda: torch.nn.Linear(4, 2)(c)}[op]
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device, "
                                               "but found at least two devices, cuda:0 and cpu!"):
            run()


def test_host_tensors_a_gpu_accepts_beside_cuda_ones_still_work():
    """0-dim host tensors are scalars; host indices and masks, and copies, are taken on a GPU."""
    with predicting():
        x = torch.arange(4.0, device="cuda")
        assert (x + torch.tensor(2.0)).device.type == "cuda"
        mask = torch.tensor([True, False, True, False])
        assert x[mask].tolist() == [0.0, 2.0]
        assert x[torch.tensor([3, 1])].tolist() == [3.0, 1.0]
        x[torch.tensor([0])] = torch.tensor([9.0], device="cuda")
        x[mask] = 5.0
        assert x.to("cpu").device.type == "cpu" and x.cpu().tolist() == [5.0, 1.0, 5.0, 3.0]
        y = torch.zeros(4, device="cuda")
        y.copy_(torch.ones(4))
        assert y.device.type == "cuda" and y.tolist() == [1.0] * 4
