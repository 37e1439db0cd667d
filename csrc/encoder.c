/* spec/encoder.py in C: encoder inputs (SpecConfig.images) and vLLM 0.33.0's EncoderCacheManager
 * with the scheduler's side of it (Scheduler._try_schedule_encoder_inputs) and the worker's ghost
 * cache.  Items are renumbered 0.. in sorted order (checker/compiled.py), so a bit set of items is
 * the spec's sorted tuple; a request's input id is its image's place in encoder.images_of.  Each
 * function names the spec function it mirrors. */
#include <string.h>
#include "compiled.h"

/* the derived image tables: each request's first image and count, each item's length */
void encoder_init(Cfg *cfg) {
    cfg->nitems = 0;
    for (int r = 0; r < MAXR; r++) { cfg->img_first[r] = 0; cfg->img_count[r] = 0; }
    for (int i = cfg->nimg - 1; i >= 0; i--) {
        int r = cfg->img_req[i];
        cfg->img_first[r] = i;
        cfg->img_count[r]++;
        cfg->nitems = imax(cfg->nitems, cfg->img_item[i] + 1);
        cfg->item_len[cfg->img_item[i]] = cfg->img_len[i];  /* encoder.item_length */
    }
}

static int image_of(const Cfg *cfg, int r, int input_id) { return cfg->img_first[r] + input_id; }

/* encoder.overlaps: the image meets the step range [start, start + n) */
static int overlaps(const Cfg *cfg, int g, int start, int n) {
    return cfg->img_off[g] < start + n && cfg->img_off[g] + cfg->img_len[g] > start;
}

static int items_length(const Cfg *cfg, int items) {
    int n = 0;
    for (int i = 0; i < cfg->nitems; i++) if (items >> i & 1) n += cfg->item_len[i];
    return n;
}

/* encoder.free_slots */
static int free_slots(const Cfg *cfg, const St *s) { return cfg->enc_size - items_length(cfg, s->enc_entries); }

/* encoder.freeable_slots */
static int freeable_slots(const Cfg *cfg, const St *s) {
    int n = free_slots(cfg, s);
    for (int k = 0; k < s->nfreeable; k++) n += cfg->item_len[s->freeable[k]];
    return n;
}

/* encoder._referenced: some request holds an input of the item */
static int referenced(const Cfg *cfg, const St *s, int item) {
    for (int r = 0; r < cfg->n; r++)
        for (int i = 0; i < cfg->img_count[r]; i++)
            if (s->enc_in[r] >> i & 1 && cfg->img_item[image_of(cfg, r, i)] == item) return 1;
    return 0;
}

/* encoder.new_pass */
void encoder_new_pass(const Cfg *cfg, Draft *d) {
    memset(&d->enc, 0, sizeof d->enc);
    d->enc.budget = cfg->enc_budget;
}

/* encoder.check_and_update_cache: the item is cached; a freeable entry stops being freeable */
static int check_and_update_cache(const Cfg *cfg, Draft *d, int r, int input_id) {
    St *s = &d->s;
    int item = cfg->img_item[image_of(cfg, r, input_id)];
    if (!(s->enc_entries >> item & 1)) return 0;
    int k = list_index(s->freeable, s->nfreeable, item);
    if (k >= 0) {
        list_remove_at(s->freeable, &s->nfreeable, k);
        EMIT(d, EV_ENCODER_CACHE_REVIVED);
    }
    s->enc_in[r] |= (uint8_t)(1 << input_id);
    return 1;
}

/* encoder.can_allocate: room for `length` more (planned already chosen), evicting the oldest
 * freeable entries when the free slots are short; within the compute budget */
static int can_allocate(const Cfg *cfg, Draft *d, int length, int budget, int planned) {
    St *s = &d->s;
    if (length > budget) return 0;
    int need = length + planned;
    if (need <= free_slots(cfg, s)) return 1;
    if (need > freeable_slots(cfg, s)) return 0;
    while (need > free_slots(cfg, s)) {
        int item = s->freeable[0];
        list_remove_at(s->freeable, &s->nfreeable, 0);
        s->enc_entries &= (uint8_t)~(1 << item);
        d->enc.freed[d->enc.nfreed++] = (uint8_t)item;
        EMIT(d, EV_ENCODER_CACHE_EVICTION);
    }
    return 1;
}

/* encoder.free_encoder_input: an entry no request references becomes freeable (still cached) */
static void free_encoder_input(const Cfg *cfg, St *s, int r, int input_id) {
    s->enc_in[r] &= (uint8_t)~(1 << input_id);
    int item = cfg->img_item[image_of(cfg, r, input_id)];
    if (s->enc_entries >> item & 1 && list_index(s->freeable, s->nfreeable, item) < 0 && !referenced(cfg, s, item))
        s->freeable[s->nfreeable++] = (uint8_t)item;
}

/* encoder.free_request: preemption, finish, a failed admission: every input r holds, in input order */
void encoder_free_request(const Cfg *cfg, Draft *d, int r) {
    if (!cfg->nimg) return;
    int held_inputs = d->s.enc_in[r];
    for (int i = 0; i < cfg->img_count[r]; i++) if (held_inputs >> i & 1) free_encoder_input(cfg, &d->s, r, i);
}

/* encoder.try_schedule: the tokens r may schedule, cut before the first image neither cached nor
 * allocatable; *to_compute (input ids, bit i) and *budget (left if r is scheduled) */
int encoder_try_schedule(const Cfg *cfg, Draft *d, int r, int computed, int n, int *to_compute, int *budget) {
    *to_compute = 0;
    *budget = d->enc.budget;
    if (!cfg->nimg || n == 0) return n;
    int planned = 0;
    for (int i = 0; i < cfg->img_count[r]; i++) {
        int g = image_of(cfg, r, i);
        if (!overlaps(cfg, g, computed, n)) continue;
        if (check_and_update_cache(cfg, d, r, i)) continue;
        if (!can_allocate(cfg, d, cfg->img_len[g], *budget, planned)) {
            EMIT(d, EV_ENCODER_INPUT_BLOCKED);
            n = computed < cfg->img_off[g] ? imin(n, cfg->img_off[g] - computed) : 0;
            break;
        }
        planned += cfg->img_len[g];
        *budget -= cfg->img_len[g];
        *to_compute |= 1 << i;
    }
    return n;
}

/* encoder.commit (with encoder.allocate): r is scheduled; its inputs to compute take their entries */
void encoder_commit(const Cfg *cfg, Draft *d, int r, int to_compute, int budget) {
    if (!cfg->nimg || !to_compute) return;
    St *s = &d->s;
    d->enc.sched[r] = (uint8_t)to_compute;
    d->enc.budget = budget;
    int reallocated = 0;
    for (int i = 0; i < cfg->img_count[r]; i++) {
        if (!(to_compute >> i & 1)) continue;
        int item = cfg->img_item[image_of(cfg, r, i)];
        reallocated |= memchr(d->enc.freed, item, (size_t)d->enc.nfreed) != NULL;
    }
    if (reallocated) EMIT(d, EV_ENCODER_EVICTED_REALLOCATED);  /* get_freed_mm_hashes leaves it out */
    for (int i = 0; i < cfg->img_count[r]; i++) {
        if (!(to_compute >> i & 1)) continue;
        s->enc_entries |= (uint8_t)(1 << cfg->img_item[image_of(cfg, r, i)]);
        s->enc_in[r] |= (uint8_t)(1 << i);
    }
    EMIT(d, EV_ENCODER_INPUT_SCHEDULED);
}

/* encoder.undo: a request preempted after it was scheduled in this step gives its budget back
 * (its entries stay allocated) */
void encoder_undo(const Cfg *cfg, Draft *d, int r) {
    if (!cfg->nimg || !d->enc.sched[r]) return;
    for (int i = 0; i < cfg->img_count[r]; i++)
        if (d->enc.sched[r] >> i & 1) d->enc.budget += cfg->img_len[image_of(cfg, r, i)];
    d->enc.sched[r] = 0;
}

/* encoder.free_processed: after a step's output, each image r holds wholly below C - H */
void encoder_free_processed(const Cfg *cfg, Draft *d, int r) {
    if (!cfg->nimg) return;
    St *s = &d->s;
    int done = s->c[r].C - s->c[r].H, held_inputs = s->enc_in[r];
    for (int i = 0; i < cfg->img_count[r]; i++) {
        int g = image_of(cfg, r, i);
        if (!(held_inputs >> i & 1) || cfg->img_off[g] + cfg->img_len[g] > done) continue;
        free_encoder_input(cfg, s, r, i);
        EMIT(d, EV_ENCODER_INPUT_RELEASED);
        for (int q = 0; q < s->nbq; q++)
            for (int k = 0; k < s->bq[q].n; k++) {
                const Entry *e = &s->bq[q].e[k];
                if (e->req == r && overlaps(cfg, g, e->start, e->ntok)) EMIT(d, EV_ENCODER_RELEASED_IN_FLIGHT);
            }
    }
}

/* encoder.finish_step (with freed_hashes): the worker drops the freed items, computes the scheduled
 * ones, then reads every image position the step covers (the ghost encoder_miss) */
void encoder_finish_step(const Cfg *cfg, Draft *d, StepC *step) {
    memset(step->esched, 0, sizeof step->esched);
    step->nfe = 0;
    if (!cfg->nimg) return;
    St *s = &d->s;
    int freed = 0, computed = 0;
    for (int k = 0; k < d->enc.nfreed; k++) {
        int item = d->enc.freed[k];
        if (s->enc_entries >> item & 1) continue;
        step->fe[step->nfe++] = (uint8_t)item;
        freed |= 1 << item;
    }
    for (int r = 0; r < cfg->n; r++) {
        step->esched[r] = d->enc.sched[r];
        for (int i = 0; i < cfg->img_count[r]; i++)
            if (d->enc.sched[r] >> i & 1) computed |= 1 << cfg->img_item[image_of(cfg, r, i)];
    }
    s->worker_enc = (uint8_t)((s->worker_enc & ~freed) | computed);
    for (int k = 0; k < step->n; k++) {
        const Entry *e = &step->e[k];
        int miss = 0;
        for (int i = 0; i < cfg->img_count[e->req]; i++) {
            int g = image_of(cfg, e->req, i);
            if (overlaps(cfg, g, e->start, e->ntok) && !(s->worker_enc >> cfg->img_item[g] & 1)) miss = 1;
        }
        if (miss) { s->enc_miss = 1; EMIT(d, EV_ENCODER_MISS); }
    }
}

/* encoder.encoder_cache_bounded: both caches within encoder_cache_size, every in-flight step's
 * embeddings within encoder_compute_budget */
int encoder_cache_bounded(const Cfg *cfg, const St *s) {
    if (imax(items_length(cfg, s->enc_entries), items_length(cfg, s->worker_enc)) > cfg->enc_size) return 1;
    for (int q = 0; q <= s->nbq; q++) {
        const StepC *st = q < s->nbq ? &s->bq[q] : s->has_def ? &s->defstep : NULL;
        int embeds = 0;
        for (int r = 0; st && r < cfg->n; r++)
            for (int i = 0; i < cfg->img_count[r]; i++)
                if (st->esched[r] >> i & 1) embeds += cfg->img_len[image_of(cfg, r, i)];
        if (embeds > cfg->enc_budget) return 1;
    }
    return 0;
}
