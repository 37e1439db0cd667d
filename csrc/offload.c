/* spec/offload.py in C: vLLM's OffloadingConnector (kv_both) as the KV connector: store jobs,
 * their fences (flushes) and completions, and the CPU hits a preempted request loads back
 * (vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py,
 * OffloadingConnectorScheduler; cited function by function in the spec). */
#include <string.h>
#include "compiled.h"

/* offload.pending_jobs */
int pending_jobs(const St *s, int r) {
    for (int k = 0; k < s->njobs; k++) if (s->jobs[k].req == r) return 1;
    return 0;
}

/* offload._flush: in this step's jobs_to_flush */
static void flush(Job *job, int outputs_before) {
    job->flushed = 1;
    job->ahead = (uint8_t)imin(job->ahead, outputs_before);
}

/* offload.request_finished */
void offload_request_finished(const Cfg *cfg, St *s, int r) {
    if (!cfg->offload) return;
    for (int k = 0; k < s->njobs; k++) if (s->jobs[k].req == r) s->jobs[k].registered = 1;
    s->otn[r] = s->btn[r];
    memcpy(s->ot[r], s->bt[r], s->btn[r]);
    s->ofin[s->nofin++] = (uint8_t)r;
}

/* offload.preempted */
void offload_preempted(const Cfg *cfg, Draft *d, int r) {
    if (!cfg->offload) return;
    St *s = &d->s;
    for (int k = 0; k < s->njobs; k++) {
        if (s->jobs[k].req != r) continue;
        flush(&s->jobs[k], s->nbq + s->has_def);
        EMIT(d, EV_OFFLOAD_FLUSH_PREEMPTED);
    }
}

/* offload._allocated: blocks this schedule() gave a request, as a mask */
static uint32_t allocated(const St *in, const St *s) {
    uint32_t mask = 0;
    for (int r = 0; r < MAXR; r++)
        for (int i = 0; i < s->btn[r]; i++)
            if (list_index(in->bt[r], in->btn[r], s->bt[r][i]) < 0) mask |= 1u << s->bt[r][i];
    return mask;
}

static uint32_t job_mask(const Job *job) {
    uint32_t mask = 0;
    for (int i = 0; i < job->nb; i++) mask |= 1u << job->b[i];
    return mask;
}

/* offload.store_horizon */
static int store_horizon(const Cfg *cfg, const St *s, int r, int n, int finished) {
    const Ctr *c = &s->c[r];
    int P = c->P, N = num_tokens(cfg, r, c), after;
    if (!finished) after = c->C + n;
    else if (c->status == F_ABORTED) after = c->C;
    else after = imax(P, N - 1);
    int cap = cfg->prompt_only ? P : N;
    return imin(imin(after, N), cap) / cfg->bs;
}

/* offload.build_connector_meta: `in` is the schedule() call's input state */
void build_connector_meta(const Cfg *cfg, const St *in, Draft *d, const Out *out) {
    if (!cfg->offload) return;
    St *s = &d->s;
    int outputs_before = in->nbq + in->has_def;
    uint32_t alloc = allocated(in, s);
    for (int k = 0; k < s->njobs; k++) {
        Job *job = &s->jobs[k];
        if (!job->flushed && job->registered && (alloc & job_mask(job))) {
            EMIT(d, EV_OFFLOAD_FLUSH);
            flush(job, outputs_before);
        }
    }
    for (int q = 0; q < out->n + s->nofin; q++) {
        int finished = q >= out->n, r = finished ? s->ofin[q - out->n] : out->req[q];
        int horizon = store_horizon(cfg, s, r, finished ? 0 : out->tok[q], finished);
        if (horizon <= s->ostored[r]) continue;
        Job job = {(uint8_t)r, 0, (uint8_t)(outputs_before + 1), 0, (uint8_t)finished, {0}};
        uint8_t blocks[MAXB];
        int nb = py_slice(finished ? s->ot[r] : s->bt[r], finished ? s->otn[r] : s->btn[r], s->ostored[r], horizon, blocks);
        job.nb = (uint8_t)nb;  /* checker/compiled.py refuses configs whose jobs could pass MAXJB or MAXJOBS */
        memcpy(job.b, blocks, (size_t)imin(nb, MAXJB));
        s->ostored[r] = (uint8_t)horizon;
        EMIT(d, finished ? EV_OFFLOAD_STORE_FINISHED : EV_OFFLOAD_STORE);
        if (finished && (alloc & job_mask(&job))) {
            EMIT(d, EV_OFFLOAD_FLUSH);
            flush(&job, outputs_before);
        }
        if (s->njobs < MAXJOBS) s->jobs[s->njobs++] = job;
    }
    for (int q = 0; q < s->nofin; q++) s->otn[s->ofin[q]] = 0;
    s->nofin = 0;
}

/* offload.check_store_reads with offload.loads_started: the step's written blocks per request
 * (a load started by this call: its whole table) */
void check_store_reads(const Cfg *cfg, const St *in, St *s, const StepC *step) {
    if (!cfg->offload) return;
    uint32_t written[MAXR] = {0};
    for (int k = 0; k < step->n; k++)
        for (int i = 0; i < step->e[k].nw; i++) written[step->e[k].req] |= 1u << step->e[k].w[i];
    for (int r = 0; r < cfg->n; r++) {
        if (s->kvt[r] != KV_LOADING || in->kvt[r] == KV_LOADING) continue;
        written[r] = 0;
        for (int i = 0; i < s->btn[r]; i++) written[r] |= 1u << s->bt[r][i];
    }
    for (int k = 0; k < s->njobs; k++) {
        const Job *job = &s->jobs[k];
        if (job->flushed) continue;
        uint32_t hit = 0;
        for (int r = 0; r < cfg->n; r++) if (k < in->njobs || r != job->req) hit |= written[r];
        if (hit & job_mask(job)) s->store_breached = 1;
    }
}

/* offload.report_choices: stored=rN for each request with a job the worker may have finished */
int offload_report_choices(const Cfg *cfg, const St *s, Report *out) {
    int n = 0;
    if (!cfg->offload) return 0;
    for (int r = 0; r < cfg->n; r++)
        for (int k = 0; k < s->njobs; k++)
            if (s->jobs[k].req == r && s->jobs[k].ahead == 0) { out[n++] = (Report){REP_STORED, (uint8_t)r, 0}; break; }
    return n;
}

/* offload.update_connector_output */
void update_connector_output(const Cfg *cfg, Draft *d, const Report *rep) {
    if (!cfg->offload) return;
    St *s = &d->s;
    int done = rep->kind == REP_STORED ? rep->req : -1;
    if (done >= 0) EMIT(d, EV_OFFLOAD_STORE_DONE);
    int n = 0;
    for (int k = 0; k < s->njobs; k++) {
        Job job = s->jobs[k];
        if (job.req == done && job.ahead == 0) continue;
        job.ahead = (uint8_t)imax(job.ahead - 1, 0);
        s->jobs[n++] = job;
    }
    s->njobs = (uint8_t)n;
}
