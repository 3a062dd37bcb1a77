/* Pairing and folding: a call about to be kept that combine would judge together with this
 * thread's last kept call (``prev``) rides on prev instead of being built and handed over:
 * a stream sync completing prev (pair_with), a copy like prev (fold_into), a copy repeating
 * prev's pair (fold_pair). The events are the same either way. And repeat(): the same, without
 * the GIL, where the thread is where it was when it kept prev. */
#include "cuptifast.h"

int folding = 1;
#if REPEAT
__thread Position P;
#endif

static int same_context(const Call *prev, PyObject *regions, PyObject *site, PyObject *allows,
                        int phase, PyObject *thread);

/* The rules below are split in two: what the new call and ``prev`` must share as C values
 * (*_fields: the call's own parameters against prev's), and the context they must share
 * (same_context with the GIL; the position without it, see repeat()). */

/* A stream sync may complete prev: prev an async host<->device copy, done, not paired yet, on the
 * sync's stream (or either stream unknown or the legacy 0). */
static int pair_fields(const Call *prev, int has_stream, uint64_t stream) {
    if (prev->role != ROLE_COPY || !prev->is_async || prev->has_pair || !prev->has_blocked ||
        (prev->dir != DIR_H2D && prev->dir != DIR_D2H))
        return 0;
    return !(prev->has_stream && prev->stream && has_stream && stream && prev->stream != stream);
}

/* Whether the stream sync about to be kept completes ``prev``, this thread's last kept call, as
 * combine would pair the two at the region's exit: pair_fields, and made from the same
 * Site object (the same stack) on the same thread under the same allows and phase, and the last
 * observation of every region the sync goes to (nothing came between them there). Then the sync
 * rides on the copy (MODE_PAIRED): no call is built or handed over, and combine makes the pair's
 * one blocking copy from the copy alone. Anything less and the sync is kept on its own, for
 * combine's rules to decide; so the events are the same either way. A loop of a copy and its
 * stream sync makes one such pair per iteration, each otherwise a call built and handed over for
 * nothing. */
static int pair_with(const Call *prev, PyObject *regions, PyObject *site, PyObject *allows,
                     int phase, PyObject *thread, int has_stream, uint64_t stream) {
    return pair_fields(prev, has_stream, stream) &&
           same_context(prev, regions, site, allows, phase, thread);
}

/* What pair_with and fold_into both ask of ``prev``: made from the same Site object (the same
 * stack) on the same thread under the same allows and phase, and the last observation of every
 * region of ``regions``, the regions it was handed to (nothing came between it and the call now
 * beginning there). */
static int same_context(const Call *prev, PyObject *regions, PyObject *site, PyObject *allows,
                        int phase, PyObject *thread) {
    if (prev->site != site || prev->thread != thread || prev->allows != allows ||
        prev->phase != phase || regions != last_regions || !last_lists)
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(last_lists); i++) {
        PyObject *list = PyTuple_GET_ITEM(last_lists, i);
        Py_ssize_t n = PyList_GET_SIZE(list);
        if (!n || PyList_GET_ITEM(list, n - 1) != (PyObject *)prev) return 0;
    }
    return 1;
}

/* Whether the async copy about to be kept is ``prev`` again, this thread's last kept call: the
 * same api, direction, stream, pointers and size (fold_fields), from the same Site object,
 * thread, allows and phase, right after it in every region it goes to. Combine judges such a run
 * of copies one by one by the same rule: each but the last is followed by a copy, so it made the
 * host wait only if its (shared) host memory is pageable, and the last one goes on as any copy.
 * So the new copy folds into prev (its duration kept, in order) and prev stands for it from then
 * on: no call is built or handed over. A loop of sync-free copies from one pinned block is such
 * a run. Only while the host memory is told by pointer (folding): activity records are per
 * copy. */
static int fold_fields(const Call *prev, const Entry *e, const Params *q) {
    if (!folding || prev->index != e->index || prev->role != ROLE_COPY || !prev->is_async ||
        prev->has_pair || !prev->has_blocked || prev->dir != q->dir ||
        (q->dir != DIR_H2D && q->dir != DIR_D2H))
        return 0;
    return prev->has_stream == q->has_stream && prev->stream == q->stream && prev->has_nbytes &&
           prev->nbytes == q->nbytes && prev->src == q->src && prev->dst == q->dst &&
           prev->has_src == (q->src != 0) && prev->has_dst == (q->dst != 0);
}

static int fold_into(const Call *prev, const Entry *e, const Params *q, PyObject *regions,
                     PyObject *site, PyObject *allows, int phase, PyObject *thread) {
    return fold_fields(prev, e, q) && same_context(prev, regions, site, allows, phase, thread);
}

/* Whether the async copy about to be kept repeats ``prev``, this thread's last kept call, where
 * prev is a copy completed by the stream sync riding on it (pair_with): the same api and
 * direction (fold_pair_fields), from the same Site object, thread, allows and phase, right after
 * it in every region it goes to, and nothing folded into prev as unpaired (those come after the
 * pairs). Combine judges each such pair the same way whatever its pointers: one blocking copy,
 * named for its sync, of both durations. So prev's pair is folded (its durations and sync kept,
 * in order) and prev stands for the new copy from then on: no call is built or handed over.
 * A loop of a pageable H2D copy and cudaStreamSynchronize per iteration is such a run. */
static int fold_pair_fields(const Call *prev, const Entry *e, int dir) {
    return folding && prev->index == e->index && prev->role == ROLE_COPY && prev->is_async &&
           prev->has_pair && prev->has_pair_blocked && prev->has_blocked && !prev->nfolded &&
           prev->dir == dir && (dir == DIR_H2D || dir == DIR_D2H);
}

static int fold_pair(const Call *prev, const Entry *e, PyObject *regions, PyObject *site,
                     PyObject *allows, int phase, PyObject *thread, int dir) {
    return fold_pair_fields(prev, e, dir) && same_context(prev, regions, site, allows, phase, thread);
}

/* Grow an array of ``size``-byte items kept on a Call to hold one more (doubling from 16); 0, or
 * -1 with MemoryError set. With the GIL: a Call's arrays only move while the GIL is held, so
 * that an exit reading them (with the GIL) never reads a moved one; repeat() only fills room
 * already there. */
static int grow(void **items, Py_ssize_t n, Py_ssize_t *cap, size_t size) {
    if (n < *cap) return 0;
    Py_ssize_t want = *cap ? 2 * *cap : 16;
    void *grown = PyMem_Realloc(*items, size * (size_t)want);
    if (!grown) { PyErr_NoMemory(); return -1; }
    *items = grown;
    *cap = want;
    return 0;
}

/* What each rule does to prev, with the GIL (enter()) or without it (repeat()): only C fields
 * of the call this thread holds, in room already grown; the caller sets the thread's mode. */
static void fold_pair_apply(Call *prev, const Params *q, uint32_t corr) {
    prev->pairs[prev->npairs++] = (struct FoldedPair){prev->blocked, prev->pair_blocked, prev->pair};
    /* prev is the new copy now, not paired yet: its own stream, pointers and size */
    prev->has_pair = prev->has_pair_blocked = 0;
    prev->has_blocked = 0;
    prev->has_stream = (int8_t)q->has_stream; prev->stream = q->stream;
    prev->has_nbytes = 1; prev->nbytes = q->nbytes;
    prev->has_src = (int8_t)(q->src != 0); prev->src = q->src;
    prev->has_dst = (int8_t)(q->dst != 0); prev->dst = q->dst;
    prev->ncorr = 1;
    prev->corr[0] = corr;
}

static void fold_apply(Call *prev, uint32_t corr) {
    prev->folded[prev->nfolded++] = prev->blocked;
    prev->has_blocked = 0;
    prev->ncorr = 1;
    prev->corr[0] = corr;
}

static void pair_apply(Call *prev, const Entry *e) {
    prev->has_pair = 1; prev->pair = e->index;
}


int pair_or_fold(Call *prev, const Entry *e, const Params *k, PyObject *regions, PyObject *site,
                 PyObject *allows, int phase, PyObject *thread) {
    if (!prev) return R_NONE;
    if (e->role == ROLE_COPY && e->is_async && k->has_ptrs &&
        fold_pair(prev, e, regions, site, allows, phase, thread, k->dir))
        return grow((void **)&prev->pairs, prev->npairs, &prev->pairs_cap, sizeof *prev->pairs) < 0
               ? -1 : R_FOLD_PAIR;
    if (e->role == ROLE_COPY && e->is_async && k->has_ptrs &&
        fold_into(prev, e, k, regions, site, allows, phase, thread))
        return grow((void **)&prev->folded, prev->nfolded, &prev->folded_cap, sizeof *prev->folded) < 0
               ? -1 : R_FOLD;
    if (e->stream_sync && pair_with(prev, regions, site, allows, phase, thread, k->has_stream, k->stream))
        return R_PAIR;
    return R_NONE;
}

int apply_rule(Call *prev, int rule, const Entry *e, const Params *k, uint32_t corr) {
    if (rule == R_FOLD_PAIR) fold_pair_apply(prev, k, corr);
    else if (rule == R_FOLD) fold_apply(prev, corr);
    else { pair_apply(prev, e); return MODE_PAIRED; }
    return MODE_KEPT;
}

#if REPEAT
/* ---- a repeat kept without the GIL ------------------------------------------------------------
 * A loop makes the same call from the same place again and again: a copy and its stream sync
 * per iteration, or a copy per iteration. Kept with the GIL, each costs the GIL, the regions,
 * the user's site and the allows. But where the thread is where it was when it kept its last
 * call, every one of those answers is the one it got then. So a call that one of the rules
 * above would fold or pair into that call is kept by them without the GIL, when:
 *  - its own parameters pass the rule's *_fields check against prev, and prev's arrays have room;
 *  - no region or allow was entered or left anywhere since (scopes_epoch, bumped from regions/region.py:
 *    so the regions and allows are the same objects, and their lists are alive);
 *  - the thread's interpreter frames are the same, each frame's code and instruction (the hash
 *    of the whole chain: so the user's site is the same Site, and so is the capture phase);
 *  - its context is the same object, entered no other since (context_ver), holding the same
 *    variables mapping (a ContextVar set makes a new one);
 *  - nothing was handed to the regions prev went to since (their lists' lengths);
 *  - prev was kept in the "run" phase. Torch's compile context is a thread-local that only
 *    Dynamo sets, around compilations whose own frames sit above any call they make; a repeat
 *    is never judged a compile-phase call, so at worst it fails where a compile-phase one would
 *    be allowed, never the other way.
 * Reading the thread's own frames and context without the GIL is safe: only this thread changes
 * them, and it is inside the CUDA call. Nothing Python is touched: no reference is taken or
 * dropped, nothing allocated. */

/* With the GIL, after enter() kept, folded or paired a call: where the thread is now, if its call
 * is one a repeat could fold or pair into (an async host<->device copy, kept in the run phase,
 * handed to the regions of its own context: ``lists``); else nothing to compare with. */
void note_position(ThreadState *t, PyObject *lists) {
    Position *q = &P;
    Call *c = t->call;
    q->valid = 0;
    if (!c || !lists || c->role != ROLE_COPY || !c->is_async || c->phase != 0 ||
        (c->dir != DIR_H2D && c->dir != DIR_D2H) || PyTuple_GET_SIZE(lists) > POS_LISTS)
        return;
    PyThreadState *ts = PyGILState_GetThisThreadState();
    if (!ts || !position(ts, &q->frames, &q->ctx, &q->vars, &q->ctx_ver)) return;
    q->nlists = (int)PyTuple_GET_SIZE(lists);
    for (int i = 0; i < q->nlists; i++) {
        q->lists[i] = PyTuple_GET_ITEM(lists, i);
        q->sizes[i] = PyList_GET_SIZE(q->lists[i]);
    }
    q->epoch = scopes_epoch;
    q->valid = 1;
}

/* An outermost call's ENTER without the GIL: 1 where it was kept as a repeat of the thread's
 * last call (see above), 0 where enter() must decide, with the GIL. */
int repeat(ThreadState *t, const Entry *e, const CallbackData *d) {
    Position *q = &P;
    Call *prev = t->call;
    if (!q->valid || !prev || t->mode != MODE_IDLE || q->epoch != scopes_epoch) return 0;
    Params k;
    int rule = R_NONE;
    if (e->stream_sync) {
        read_params(e, d, &k);
        if (pair_fields(prev, k.has_stream, k.stream)) rule = R_PAIR;
    } else if (e->role == ROLE_COPY && e->is_async) {
        read_params(e, d, &k);
        if (!k.has_ptrs) return 0;
        if (fold_pair_fields(prev, e, k.dir)) rule = prev->npairs < prev->pairs_cap ? R_FOLD_PAIR : 0;
        else if (fold_fields(prev, e, &k)) rule = prev->nfolded < prev->folded_cap ? R_FOLD : 0;
    }
    if (rule == R_NONE) return 0;
    PyThreadState *ts = PyGILState_GetThisThreadState();
    uint64_t frames, ver;
    const void *ctx, *vars;
    if (!ts || !position(ts, &frames, &ctx, &vars, &ver) || frames != q->frames ||
        ctx != q->ctx || vars != q->vars || ver != q->ctx_ver)
        return 0;
    for (int i = 0; i < q->nlists; i++)
        if (PyList_GET_SIZE(q->lists[i]) != q->sizes[i]) return 0;
    if (rule == R_PAIR) pair_apply(prev, e);
    else if (rule == R_FOLD_PAIR) fold_pair_apply(prev, &k, d->correlationId);
    else fold_apply(prev, d->correlationId);
    t->mode = rule == R_PAIR ? MODE_PAIRED : MODE_KEPT;
    stamp(prev, t->mode);
    return 1;
}
#endif
