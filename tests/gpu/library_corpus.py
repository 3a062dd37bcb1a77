"""The library corpus: torch library code that no one here wrote, one call per snippet.

Each snippet makes exactly one call on the line marked ``# CALL``; that line is where a detector
must attribute whatever the call waits for. Nothing here says what a snippet *should* do: whether
it syncs, and how, is measured in the same run from the CUDA runtime trace and sync-debug mode
(tools/corpus_report.py). Set-up that must not be audited (fresh optimiser state, a captured
graph, deterministic mode) lives in ``setup``/``context``, which the runner calls outside the
audited region; tensors shared by all snippets are made by ``state()`` before any region opens.

Some snippets are the sync-free alternatives that ``syncguard.records.alternatives`` names; the GPU run
checks that claim on the same GPU. ``source`` names the
torch source file that issues a C++-level sync for the snippets picked for that reason.
``capture`` marks snippets that capture a CUDA graph: nothing else may touch CUDA meanwhile.
"""
from __future__ import annotations

import contextlib
import inspect
import types
from dataclasses import dataclass, field
from typing import Callable

MARK = "# CALL"
LIBRARY: list["LibrarySnippet"] = []


@dataclass(frozen=True)
class LibrarySnippet:
    name: str
    fn: Callable
    group: str
    setup: Callable | None = None  # per run, outside the region
    context: Callable | None = None  # a context manager factory entered outside the region
    source: str | None = None  # torch source file of a C++-issued sync
    capture: bool = False
    doc: str = field(default="", compare=False)

    @property
    def call_line(self) -> int | None:
        lines, start = inspect.getsourcelines(self.fn)
        for i, text in enumerate(lines):
            if MARK in text:
                return start + i
        return None


def snippet(group: str, *, setup=None, context=None, source=None,
            capture=False):
    def deco(fn):
        doc = (inspect.getdoc(fn) or "").split("\n")[0]
        LIBRARY.append(LibrarySnippet(fn.__name__, fn, group, setup, context, source, capture,
                                      doc))
        return fn
    return deco


def _deterministic():
    import torch

    @contextlib.contextmanager
    def cm():
        before = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(True)
        try:
            yield
        finally:
            torch.use_deterministic_algorithms(before)
    return cm()


def state():
    """Everything the snippets share, made (and warmed) before any region opens."""
    import torch
    import torch.nn as nn

    d = "cuda"
    s = types.SimpleNamespace()
    torch.manual_seed(0)
    s.x = torch.randn(4096, device=d)
    s.mask = s.x > 0
    s.cpu_mask = s.mask.cpu()
    s.cpu_rows = torch.arange(0, 4096, 7)
    s.emb = torch.randn(4096, 64, device=d)
    s.n_true = int(s.cpu_mask.sum())
    s.rows = torch.randn(s.n_true, 64, device=d)
    s.labels = torch.randint(0, 10, (512,), device=d)
    s.counts = torch.randint(0, 4, (256,), device=d)
    s.counts_total = int(s.counts.sum())
    s.test_ids = torch.randint(0, 4096, (64,), device=d)
    s.probs = torch.softmax(torch.randn(64, 100, device=d), -1)
    s.logits = torch.randn(64, 100, device=d)
    s.loc, s.scale = torch.zeros(256, device=d), torch.ones(256, device=d)
    s.normal = torch.distributions.Normal(s.loc, s.scale, validate_args=False)
    s.value = torch.randn(256, device=d)
    a = torch.randn(64, 64, device=d)
    s.spd = a @ a.T + 64 * torch.eye(64, device=d)
    s.sym = (a + a.T) / 2
    s.b = torch.randn(64, 8, device=d)
    s.tall = torch.randn(128, 64, device=d)
    s.tall_b = torch.randn(128, 8, device=d)
    s.dense = torch.where(torch.rand(256, 256, device=d) > 0.9, 1.0, 0.0)
    idx = torch.randint(0, 64, (2, 512), device=d)
    s.uncoalesced = torch.sparse_coo_tensor(idx, torch.randn(512, device=d), (64, 64))
    idx3 = torch.stack([torch.randint(0, 4, (256,)), torch.randint(0, 32, (256,)),
                        torch.randint(0, 32, (256,))]).to(d)
    s.sparse3 = torch.sparse_coo_tensor(idx3, torch.randn(256, device=d), (4, 32, 32)).coalesce()
    s.dense3 = torch.randn(4, 32, 16, device=d)
    s.padded = torch.randn(8, 32, 16, device=d)
    s.lengths_cpu = torch.randint(1, 33, (8,))
    s.lengths_sorted = s.lengths_cpu.sort(descending=True).values
    s.seqs = [torch.randn(n, 16, device=d) for n in (5, 9, 3)]
    s.a = torch.randn(256, 256, device=d)
    s.a2 = s.a + 1e-3
    s.table = nn.Embedding(1000, 64).to(d)
    s.tokens = torch.randint(0, 1000, (512,), device=d)
    s.log_probs = torch.randn(50, 4, 20, device=d).log_softmax(-1)
    s.targets = torch.randint(1, 20, (4, 10), device=d)
    s.in_lens = torch.full((4,), 50, dtype=torch.long, device=d)
    s.tgt_lens = torch.full((4,), 10, dtype=torch.long, device=d)
    s.small = torch.randn(8, device=d)
    s.loss = s.x.sum()

    def model():
        return nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256)).to(d)

    s.model = model()
    s.inp = torch.randn(32, 256, device=d)

    def grads(m):
        m.zero_grad(set_to_none=True)
        m(s.inp).square().mean().backward()

    s.grads = lambda: grads(s.model)
    s.grads()
    opt = torch.optim
    s.opts = {
        "adam_foreach": opt.Adam(s.model.parameters(), foreach=True),
        "adam_fused": opt.Adam(s.model.parameters(), fused=True),
        "adam_capturable": opt.Adam(s.model.parameters(), foreach=True, capturable=True),
        "adam_single_tensor": opt.Adam(s.model.parameters(), foreach=False),
        "adamw_foreach": opt.AdamW(s.model.parameters(), foreach=True),
        "adamw_fused": opt.AdamW(s.model.parameters(), fused=True),
        "sgd_momentum": opt.SGD(s.model.parameters(), lr=0.01, momentum=0.9, foreach=True),
    }

    # AMP: a fresh scaler per run, so each of unscale_/step/update starts from the state it needs.
    s.amp_model = model()
    s.amp_opt = opt.SGD(s.amp_model.parameters(), lr=0.01)

    def amp_ready(stage):
        scaler = torch.amp.GradScaler("cuda")
        s.amp_opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = s.amp_model(s.inp).float().square().mean()
        scaler.scale(loss).backward()
        if stage >= 1:
            scaler.step(s.amp_opt)
        s.scaler = scaler

    s.amp_ready = amp_ready

    # torch.compile: one function with a graph break (.item()), one without.
    def with_break(t):
        y = t * 2
        if y.sum().item() > 0:  # graph break
            return y + 1
        return y - 1

    def no_break(t):
        return (t * 2).relu() + 1

    try:
        s.compiled_break = torch.compile(with_break)
        s.compiled_clean = torch.compile(no_break)
    except Exception as e:  # noqa: BLE001 - recorded per snippet by the runner when called
        s.compile_error = e

    # CUDA graph: captured by the replay snippet's set-up (so a failed capture costs one
    # snippet, not the corpus)
    s.static_in = torch.randn(4096, device=d)
    s.static_out = torch.empty(4096, device=d)
    s.graph = None
    return s


# --- optimizers ------------------------------------------------------------------------------
def _step_setup(s):
    s.grads()


_OPTIMIZERS = {
    "adam_foreach": "torch.optim.Adam(foreach=True).step()",
    "adam_fused": "torch.optim.Adam(fused=True).step()",
    "adam_capturable": "torch.optim.Adam(capturable=True).step(): step counts on the device",
    "adam_single_tensor": "torch.optim.Adam(foreach=False).step()",
    "adamw_foreach": "torch.optim.AdamW(foreach=True).step()",
    "adamw_fused": "torch.optim.AdamW(fused=True).step()",
    "sgd_momentum": "torch.optim.SGD(momentum=0.9, foreach=True).step()",
}


def _optimizer_snippet(key: str, doc: str) -> None:
    def fn(s):
        s.opts[key].step()  # CALL

    fn.__name__ = f"{key}_step"
    LIBRARY.append(LibrarySnippet(fn.__name__, fn, "optimizers", setup=_step_setup, doc=doc))


for _key, _doc in _OPTIMIZERS.items():
    _optimizer_snippet(_key, _doc)


# --- AMP GradScaler --------------------------------------------------------------------------
@snippet("amp", setup=lambda s: s.amp_ready(0))
def grad_scaler_unscale(s):
    """GradScaler.unscale_(optimizer)"""
    s.scaler.unscale_(s.amp_opt)  # CALL


@snippet("amp", setup=lambda s: s.amp_ready(0))
def grad_scaler_step(s):
    """GradScaler.step(optimizer): reads found_inf on the host"""
    s.scaler.step(s.amp_opt)  # CALL


@snippet("amp", setup=lambda s: s.amp_ready(1))
def grad_scaler_update(s):
    """GradScaler.update()"""
    s.scaler.update()  # CALL


# --- clip_grad_norm_ -------------------------------------------------------------------------
@snippet("clip_grad", setup=_step_setup)
def clip_grad_norm(s):
    """nn.utils.clip_grad_norm_(params, 1.0)"""
    __import__("torch").nn.utils.clip_grad_norm_(s.model.parameters(), 1.0)  # CALL


@snippet("clip_grad", setup=_step_setup)
def clip_grad_norm_error_if_nonfinite(s):
    """nn.utils.clip_grad_norm_(..., error_if_nonfinite=True): checks the norm on the host"""
    __import__("torch").nn.utils.clip_grad_norm_(s.model.parameters(), 1.0, error_if_nonfinite=True)  # CALL


@snippet("clip_grad", setup=_step_setup)
def clip_grad_value(s):
    """nn.utils.clip_grad_value_(params, 0.5)"""
    __import__("torch").nn.utils.clip_grad_value_(s.model.parameters(), 0.5)  # CALL


# --- linalg ----------------------------------------------------------------------------------
@snippet("linalg")
def linalg_eigh(s):
    """torch.linalg.eigh"""
    __import__("torch").linalg.eigh(s.sym)  # CALL


@snippet("linalg")
def linalg_cholesky(s):
    """torch.linalg.cholesky: raises on a non-SPD input, so reads info on the host"""
    __import__("torch").linalg.cholesky(s.spd)  # CALL


@snippet("linalg")
def linalg_cholesky_ex(s):
    """torch.linalg.cholesky_ex: returns info as a tensor instead of raising"""
    __import__("torch").linalg.cholesky_ex(s.spd)  # CALL


@snippet("linalg")
def linalg_inv(s):
    """torch.linalg.inv"""
    __import__("torch").linalg.inv(s.spd)  # CALL


@snippet("linalg")
def linalg_inv_ex(s):
    """torch.linalg.inv_ex: info as a tensor"""
    __import__("torch").linalg.inv_ex(s.spd)  # CALL


@snippet("linalg")
def linalg_solve(s):
    """torch.linalg.solve"""
    __import__("torch").linalg.solve(s.spd, s.b)  # CALL


@snippet("linalg")
def linalg_solve_ex(s):
    """torch.linalg.solve_ex: info as a tensor"""
    __import__("torch").linalg.solve_ex(s.spd, s.b)  # CALL


@snippet("linalg")
def linalg_lstsq(s):
    """torch.linalg.lstsq"""
    __import__("torch").linalg.lstsq(s.tall, s.tall_b)  # CALL


# --- distributions ---------------------------------------------------------------------------
@snippet("distributions")
def categorical_validate_args(s):
    """distributions.Categorical(probs, validate_args=True): checks the simplex on the host"""
    __import__("torch").distributions.Categorical(probs=s.probs, validate_args=True)  # CALL


@snippet("distributions")
def categorical_no_validate_args(s):
    """distributions.Categorical(probs, validate_args=False)"""
    __import__("torch").distributions.Categorical(probs=s.probs, validate_args=False)  # CALL


@snippet("distributions")
def categorical_sample(s):
    """Categorical(logits, validate_args=False).sample()"""
    __import__("torch").distributions.Categorical(logits=s.logits, validate_args=False).sample()  # CALL


@snippet("distributions")
def normal_validate_args(s):
    """distributions.Normal(loc, scale, validate_args=True)"""
    __import__("torch").distributions.Normal(s.loc, s.scale, validate_args=True)  # CALL


@snippet("distributions")
def normal_no_validate_args(s):
    """distributions.Normal(loc, scale, validate_args=False)"""
    __import__("torch").distributions.Normal(s.loc, s.scale, validate_args=False)  # CALL


@snippet("distributions")
def normal_sample(s):
    """Normal.sample()"""
    s.normal.sample()  # CALL


# --- sparse (and C++-issued syncs) -----------------------------------------------------------
@snippet("sparse")
def to_sparse(s):
    """Tensor.to_sparse(): the number of non-zeros sizes the result"""
    s.dense.to_sparse()  # CALL


@snippet("sparse", source="aten/src/ATen/native/sparse/cuda/SparseCUDATensor.cu "
                          "(_coalesce_sparse_cuda: thrust::unique_by_key reads its end on the host)")
def sparse_coalesce(s):
    """Tensor.coalesce() of an uncoalesced COO tensor: thrust, not c10, waits"""
    s.uncoalesced.coalesce()  # CALL


@snippet("sparse", source="aten/src/ATen/native/sparse/cuda/SparseCUDATensorMath.cu "
                          "(bmm_out_sparse_cuda: AT_CUDA_CHECK(cudaMemcpy(..., DeviceToHost)))")
def sparse_bmm(s):
    """torch.bmm(sparse COO 3-D, dense): a plain cudaMemcpy from C++"""
    __import__("torch").bmm(s.sparse3, s.dense3)  # CALL


@snippet("cpp_syncs", source="aten/src/ATen/native/cuda/TensorModeKernel.cu (apply_mode, slices "
                          "over 2048: thrust::inner_product and a device_reference read return "
                          "values to the host; cudaMemcpyAsync H2D from a stack variable)")
def torch_mode_long_slice(s):
    """torch.mode over 4096 elements: thrust on the host path, not c10"""
    __import__("torch").mode(s.x)  # CALL


@snippet("cpp_syncs")
def torch_mode_short_slice(s):
    """torch.mode over 8 elements: the fused kernel"""
    __import__("torch").mode(s.small)  # CALL


# --- nn.utils.rnn ----------------------------------------------------------------------------
@snippet("rnn")
def pack_padded_sequence_unsorted(s):
    """nn.utils.rnn.pack_padded_sequence(CPU lengths, enforce_sorted=False)"""
    __import__("torch").nn.utils.rnn.pack_padded_sequence(s.padded, s.lengths_cpu, batch_first=True, enforce_sorted=False)  # CALL


@snippet("rnn")
def pack_padded_sequence_sorted(s):
    """nn.utils.rnn.pack_padded_sequence(sorted CPU lengths)"""
    __import__("torch").nn.utils.rnn.pack_padded_sequence(s.padded, s.lengths_sorted, batch_first=True)  # CALL


@snippet("rnn")
def pad_sequence(s):
    """nn.utils.rnn.pad_sequence(list of CUDA tensors)"""
    __import__("torch").nn.utils.rnn.pad_sequence(s.seqs, batch_first=True)  # CALL


# --- F.one_hot -------------------------------------------------------------------------------
@snippet("one_hot")
def one_hot(s):
    """F.one_hot(labels): the class count is read from the data"""
    __import__("torch").nn.functional.one_hot(s.labels)  # CALL


@snippet("one_hot")
def one_hot_num_classes(s):
    """F.one_hot(labels, num_classes=10)"""
    __import__("torch").nn.functional.one_hot(s.labels, num_classes=10)  # CALL


# --- data-dependent shapes -------------------------------------------------------------------
@snippet("shapes")
def repeat_interleave_tensor(s):
    """Tensor.repeat_interleave(counts) on rows"""
    s.emb[:256].repeat_interleave(s.counts, dim=0)  # CALL


@snippet("shapes")
def repeat_interleave_tensor_output_size(s):
    """Tensor.repeat_interleave(counts, output_size=known total)"""
    s.emb[:256].repeat_interleave(s.counts, dim=0, output_size=s.counts_total)  # CALL


@snippet("shapes")
def torch_nonzero(s):
    """torch.nonzero(mask)"""
    __import__("torch").nonzero(s.mask)  # CALL


@snippet("shapes")
def nonzero_static(s):
    """torch.nonzero_static(mask, size=4096): fixed size, padded"""
    __import__("torch").nonzero_static(s.mask, size=4096)  # CALL


@snippet("shapes")
def where_one_arg(s):
    """torch.where(mask): nonzero in disguise"""
    __import__("torch").where(s.mask)  # CALL


@snippet("shapes")
def torch_unique(s):
    """torch.unique(labels, return_counts=True)"""
    __import__("torch").unique(s.labels, return_counts=True)  # CALL


@snippet("shapes")
def unique_consecutive(s):
    """torch.unique_consecutive(labels)"""
    __import__("torch").unique_consecutive(s.labels)  # CALL


@snippet("shapes")
def torch_isin(s):
    """torch.isin(x, test_elements)"""
    __import__("torch").isin(s.labels, s.test_ids)  # CALL


@snippet("shapes")
def torch_masked_select(s):
    """torch.masked_select(x, mask)"""
    __import__("torch").masked_select(s.x, s.mask)  # CALL


@snippet("shapes")
def where_three_args(s):
    """torch.where(mask, x, 0): keeps the shape, so nothing is counted"""
    __import__("torch").where(s.mask, s.x, 0.0)  # CALL


@snippet("shapes")
def bincount(s):
    """torch.bincount(labels): the bin count is read from the data"""
    __import__("torch").bincount(s.labels)  # CALL


@snippet("shapes")
def bincount_minlength(s):
    """torch.bincount(labels, minlength=10)"""
    __import__("torch").bincount(s.labels, minlength=10)  # CALL


@snippet("shapes")
def scatter_add_counts(s):
    """torch.zeros(10).scatter_add_(0, labels, ones): bincount with a known size"""
    __import__("torch").zeros(10, dtype=s.labels.dtype, device="cuda").scatter_add_(0, s.labels, __import__("torch").ones_like(s.labels))  # CALL


@snippet("shapes")
def index_put_accumulate_cpu_mask(s):
    """x.index_put_((cpu_mask,), rows, accumulate=True)"""
    s.emb.index_put_((s.cpu_mask,), s.rows, accumulate=True)  # CALL


@snippet("shapes")
def index_with_cpu_int_tensor(s):
    """x[cpu_long_tensor]"""
    s.emb[s.cpu_rows]  # CALL


@snippet("shapes", context=_deterministic)
def index_put_cpu_mask_deterministic(s):
    """x[cpu_mask] = rows under use_deterministic_algorithms(True)"""
    s.emb[s.cpu_mask] = s.rows  # CALL


# --- sampling --------------------------------------------------------------------------------
@snippet("sampling")
def multinomial(s):
    """torch.multinomial(probs, 1)"""
    __import__("torch").multinomial(s.probs, 1)  # CALL


@snippet("sampling")
def multinomial_without_replacement(s):
    """torch.multinomial(probs, 4, replacement=False)"""
    __import__("torch").multinomial(s.probs, 4, replacement=False)  # CALL


@snippet("sampling")
def randperm(s):
    """torch.randperm(4096, device='cuda')"""
    __import__("torch").randperm(4096, device="cuda")  # CALL


# --- torch.testing, comparisons, printing ----------------------------------------------------
@snippet("testing")
def testing_assert_close(s):
    """torch.testing.assert_close(a, a)"""
    __import__("torch").testing.assert_close(s.a, s.a)  # CALL


@snippet("testing")
def allclose(s):
    """torch.allclose(a, b): a Python bool"""
    __import__("torch").allclose(s.a, s.a2, atol=1e-2)  # CALL


@snippet("testing")
def torch_equal(s):
    """torch.equal(a, a): a Python bool"""
    __import__("torch").equal(s.a, s.a)  # CALL


@snippet("printing")
def repr_cuda_tensor(s):
    """repr() of a CUDA tensor"""
    repr(s.small)  # CALL


@snippet("printing")
def format_cuda_scalar(s):
    """f-string of a CUDA scalar: f'{loss:.3f}'"""
    f"{s.loss:.3f}"  # CALL


@snippet("printing")
def tolist_argmax(s):
    """logits.argmax(-1).tolist()"""
    s.logits.argmax(-1).tolist()  # CALL


# --- nn.functional ---------------------------------------------------------------------------
@snippet("functional")
def embedding_max_norm(s):
    """F.embedding(tokens, weight, max_norm=1.0): renormalises the rows it touches in place"""
    __import__("torch").nn.functional.embedding(s.tokens, s.table.weight.detach(), max_norm=1.0)  # CALL


@snippet("functional")
def ctc_loss_cuda_lengths(s):
    """F.ctc_loss with lengths as CUDA tensors"""
    __import__("torch").nn.functional.ctc_loss(s.log_probs, s.targets, s.in_lens, s.tgt_lens)  # CALL


@snippet("functional")
def cross_entropy(s):
    """F.cross_entropy(logits, labels)"""
    __import__("torch").nn.functional.cross_entropy(s.logits, s.labels[:64] % 100)  # CALL


@snippet("functional")
def histc(s):
    """torch.histc(x, bins=10): min and max from the data"""
    __import__("torch").histc(s.x, bins=10)  # CALL


@snippet("functional")
def histc_with_range(s):
    """torch.histc(x, bins=10, min=-4, max=4)"""
    __import__("torch").histc(s.x, bins=10, min=-4, max=4)  # CALL


# --- torch.compile ---------------------------------------------------------------------------
@snippet("compile")
def compiled_graph_break_item(s):
    """a torch.compile'd function with .item() inside (a graph break)"""
    s.compiled_break(s.x)  # CALL


@snippet("compile")
def compiled_no_break(s):
    """a torch.compile'd function without a break"""
    s.compiled_clean(s.x)  # CALL


# --- CUDA graphs -----------------------------------------------------------------------------
def _captured_graph(s):
    """Capture once (outside any region, warm-up included), then reuse."""
    import torch

    if s.graph is not None:
        return
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            s.static_out.copy_(s.static_in * 2 + 1)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        s.static_out.copy_(s.static_in * 2 + 1)
    torch.cuda.synchronize()
    s.graph = graph


@snippet("cuda_graphs", setup=_captured_graph, capture=True)
def cuda_graph_replay(s):
    """CUDAGraph.replay()"""
    s.graph.replay()  # CALL


def _new_graph(s):
    s.graph2 = __import__("torch").cuda.CUDAGraph()


@snippet("cuda_graphs", setup=_new_graph, capture=True)
def cuda_graph_capture(s):
    """with torch.cuda.graph(g): ... (capturing one copy)"""
    with __import__("torch").cuda.graph(s.graph2): s.static_out.copy_(s.static_in * 2 + 1)  # CALL  # noqa: E701


# --- device<->host conveniences --------------------------------------------------------------
@snippet("copies")
def to_cpu_non_blocking(s):
    """x.to('cpu', non_blocking=True)"""
    s.x.to("cpu", non_blocking=True)  # CALL


@snippet("copies")
def get_rng_state(s):
    """torch.cuda.get_rng_state()"""
    __import__("torch").cuda.get_rng_state()  # CALL


@snippet("copies")
def manual_seed(s):
    """torch.manual_seed(0) (seeds every CUDA generator too)"""
    __import__("torch").manual_seed(0)  # CALL


# --- checkpoints: torch.save / torch.load of CUDA tensors -----------------------------------
def _checkpoint(s):
    """A checkpoint of two CUDA tensors on two storages, read from the start by each run."""
    import io

    import torch

    if not hasattr(s, "checkpoint"):
        s.checkpoint = io.BytesIO()
        torch.save({"x": s.x, "small": s.small}, s.checkpoint)
    s.checkpoint.seek(0)


@snippet("checkpoints")
def torch_save(s):
    """torch.save of two CUDA tensors (each storage is copied to the host)"""
    __import__("torch").save({"x": s.x, "small": s.small}, __import__("io").BytesIO())  # CALL


@snippet("checkpoints", setup=_checkpoint)
def torch_load(s):
    """torch.load of a checkpoint of CUDA tensors, each restored to its saved device"""
    __import__("torch").load(s.checkpoint)  # CALL


@snippet("checkpoints", setup=_checkpoint)
def torch_load_storage_cuda(s):
    """torch.load(f, map_location=lambda storage, loc: storage.cuda()), the older idiom"""
    __import__("torch").load(s.checkpoint, map_location=lambda st, loc: st.cuda())  # CALL


# =============================================================================================
# The project's own patterns (cases/): every merge variant with and without deterministic
# mode, and the CPU-path batching. Kept apart from LIBRARY (they are not torch library code);
# the runner reports them as the "cases" corpus. The first user frame of their syncs is inside
# cases/, so a detector is right when the snippet's line is on the event's stack.
CASES: list[LibrarySnippet] = []
MERGE_SHAPE = (4096, 512)  # tokens x hidden, bf16, half the tokens multimodal in 1024-token runs


def _merge_snippet(variant: str, deterministic: bool) -> None:
    key = variant + ("_deterministic" if deterministic else "")

    def fn(s):
        s.merge[key][0](*s.merge[key][1])  # CALL

    def setup(s):
        from cases.merge import VARIANTS, representative_inputs

        s.merge[key] = (VARIANTS[variant].fn, representative_inputs(variant, *MERGE_SHAPE))

    fn.__name__ = f"merge_{key}"
    CASES.append(LibrarySnippet(fn.__name__, fn, "merge", setup=setup,
                                context=_deterministic if deterministic else None,
                                doc=f"cases.merge variant {variant}"
                                    + (" under use_deterministic_algorithms(True)"
                                       if deterministic else "")))


for _v in ("index_put_cpu_mask", "masked_scatter", "index_put_gpu_mask", "index_copy_rows",
           "triton_row_scatter", "triton_device_rows"):
    for _det in (False, True):
        _merge_snippet(_v, _det)


def _batching_snippet(name: str, doc: str, call: Callable) -> None:
    def fn(s):
        call(s)  # CALL

    fn.__name__ = name
    CASES.append(LibrarySnippet(name, fn, "cpu_path", doc=doc))


def _items():
    import torch

    g = torch.Generator().manual_seed(0)
    return [{"pixel_values": torch.randn(n, 3, 16, 16, generator=g),
             "image_grid_thw": torch.ones(n, 3, dtype=torch.long)} for n in (3, 1, 4)]


def case_state():
    """The cases' shared state; merge inputs are made per run by each snippet's setup."""
    s = types.SimpleNamespace(merge={}, items=_items())
    return s


_batching_snippet("batch_fields_cuda", "cases.batching.batch_fields(items, 'cuda'): pinned, "
                  "non-blocking", lambda s: __import__("cases.batching", fromlist=["x"])
                  .batch_fields(s.items, "cuda"))
_batching_snippet("batch_fields_cpu", "cases.batching.batch_fields(items, 'cpu')",
                  lambda s: __import__("cases.batching", fromlist=["x"]).batch_fields(s.items, "cpu"))
_batching_snippet("batch_fields_always_pinned_cpu",
                  "cases.batching.batch_fields_always_pinned(items, 'cpu'): pins for nothing",
                  lambda s: __import__("cases.batching", fromlist=["x"])
                  .batch_fields_always_pinned(s.items, "cpu"))


# --- what a real suite (kornia, issue #45) calls: the facts that decide each one's sync -------
# Each pairs with a snippet above that differs in one fact: a dense bmm beside the sparse one,
# a host scalar written through a CUDA mask beside a device tensor (assign_with_cuda_mask), a
# CUDA index beside a CPU one, histc's min == max beside its absent range. Their tensors are
# made by their set-up, outside the region, so the shared state() is unchanged.
def _kornia_setup(s):
    import torch

    s.k_a = torch.randn(4, 32, 32, device="cuda")
    s.k_b = torch.randn(4, 32, 16, device="cuda")
    s.k_target = s.emb.clone()
    s.k_value = torch.tensor(-1.0, device="cuda")
    s.k_host = torch.randn(5, 5)
    s.k_square = torch.randn(64, 64, device="cuda")


@snippet("dense_math", setup=_kornia_setup)
def dense_bmm(s):
    """torch.bmm(dense 3-D, dense 3-D): sparse_bmm's dense twin"""
    __import__("torch").bmm(s.k_a, s.k_b)  # CALL


@snippet("dense_math", setup=_kornia_setup)
def dense_matmul_3d(s):
    """a @ b on dense 3-D CUDA tensors (kornia's chained transforms)"""
    s.k_a @ s.k_a  # CALL


@snippet("dense_math", setup=_kornia_setup)
def einsum_batched(s):
    """torch.einsum('bij,bjk->bik', a, b): a bmm underneath"""
    __import__("torch").einsum("bij,bjk->bik", s.k_a, s.k_b)  # CALL


@snippet("shapes", setup=_kornia_setup)
def index_put_cuda_mask_host_scalar(s):
    """x[cuda_mask] = -1.0: a Python scalar through a CUDA mask"""
    s.k_target[s.mask] = -1.0  # CALL


@snippet("shapes", setup=_kornia_setup)
def index_put_cuda_mask_device_scalar(s):
    """x[cuda_mask] = 0-dim CUDA tensor"""
    s.k_target[s.mask] = s.k_value  # CALL


@snippet("shapes")
def index_with_cuda_int_tensor(s):
    """x[cuda_long_tensor]"""
    s.emb[s.test_ids]  # CALL


@snippet("linalg", setup=_kornia_setup)
def linalg_svd(s):
    """torch.linalg.svd(A)"""
    __import__("torch").linalg.svd(s.k_square)  # CALL


@snippet("copies", setup=_kornia_setup)
def as_tensor_host_tensor_to_cuda(s):
    """torch.as_tensor(cpu_tensor, device='cuda')"""
    __import__("torch").as_tensor(s.k_host, device="cuda")  # CALL


@snippet("copies")
def as_tensor_list_to_cuda(s):
    """torch.as_tensor([0.5, 0.5, 0.5], device='cuda')"""
    __import__("torch").as_tensor([0.5, 0.5, 0.5], device="cuda")  # CALL


@snippet("cpp_syncs")
def histc_equal_range(s):
    """torch.histc(x, bins=10, min=0.5, max=0.5): min == max reads the range from the data"""
    __import__("torch").histc(s.x, bins=10, min=0.5, max=0.5)  # CALL
