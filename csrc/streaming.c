/* spec/streaming.py in C: streaming-input (resumable) sessions, their turns, pauses and inputs.
 * Each function names the spec function it mirrors; the order of every list edit is the spec's. */
#include "compiled.h"

int is_session(const Cfg *cfg, int r) {
    for (int i = 0; i < cfg->nsess; i++) if (cfg->sess[i] == r) return 1;
    return 0;
}

/* streaming.stop_frontier: resume from C - H, every in-flight step's output stale and dropped */
static void stop_frontier(Ctr *c) {
    c->C = (int16_t)(c->C - c->H);
    c->H = 0;
    c->X = c->F;
    c->D = 1;
    c->S = 0;
}

/* streaming.take_next_input (with apply_update and session_update): 1 when it ends the stream */
static int take_next_input(const Cfg *cfg, Draft *d, int r) {
    St *s = &d->s;
    int index = ++s->sapplied[r];
    if (index > cfg->nupd) {  /* streaming._closes */
        EMIT(d, EV_STREAM_END);
        return 1;
    }
    Ctr *c = &s->c[r];
    int kept = num_tokens(cfg, r, c) - 1;
    c->P = (int16_t)(kept + cfg->upd_u[index - 1]);
    c->M = (int16_t)cfg->upd_m[index - 1];
    c->status = WAITING;
    c->O = 0;
    return 0;
}

/* streaming.enqueue: out of every queue, to the back of kv_holding_waiting (C > 0) or waiting */
static void enqueue(const Cfg *cfg, St *s, int r) {
    list_drop(s->run, &s->nrun, r);
    list_drop(s->wait, &s->nwait, r);
    list_drop(s->kv, &s->nkv, r);
    if (s->c[r].C > 0) s->kv[s->nkv++] = (uint8_t)r;
    else s->wait[s->nwait++] = (uint8_t)r;
    order_queues(cfg, s);
}

/* streaming.resumes_after_stop: 0 when the stopped r finishes (the caller frees it) */
int resumes_after_stop(const Cfg *cfg, Draft *d, int r) {
    if (!is_session(cfg, r)) return 0;
    St *s = &d->s;
    Ctr *c = &s->c[r];
    if (c->F > 0) EMIT(d, EV_STREAM_STOP_IN_FLIGHT);
    stop_frontier(c);
    if (s->ssent[r] > s->sapplied[r]) {
        if (take_next_input(cfg, d, r)) return 0;
        EMIT(d, EV_STREAM_CONTINUE);
    } else {
        c->status = WAITING_FOR_STREAMING_REQ;
        EMIT(d, EV_STREAM_PAUSE);
    }
    enqueue(cfg, s, r);
    return 1;
}

/* streaming.next_input: 0 none, 1 stream_update, 2 stream_close */
int next_input(const Cfg *cfg, const St *s, int r) {
    const Ctr *c = &s->c[r];
    if (!is_session(cfg, r) || c->status == NOT_ARRIVED || is_finished(c)) return 0;
    int sent = s->ssent[r];
    if (sent > cfg->nupd) return 0;
    return sent + 1 > cfg->nupd ? 2 : 1;
}

/* engine.stream_input (with streaming.take_input): the end of a paused session's stream finishes it */
void stream_input(const Cfg *cfg, Draft *d, int r) {
    St *s = &d->s;
    s->ssent[r]++;
    if (s->c[r].status != WAITING_FOR_STREAMING_REQ) {
        EMIT(d, EV_STREAM_QUEUED);
        return;
    }
    if (take_next_input(cfg, d, r)) {
        s->c[r].status = F_ABORTED;
        free_finished(cfg, d, r, 0);
        return;
    }
    EMIT(d, EV_STREAM_RESUME);
}
