/*
 * The golden seed_A training loop on real ggml, as a C program: the same loop as
 * seed_loop.py (read its docstring), built against the ggml headers and shared libraries that
 * ggml-python's wheel installs (<prefix>/include, <prefix>/lib; see test_seed_loop_c.py):
 *
 *     cc seed_loop.c -I$PREFIX/include -L$PREFIX/lib -Wl,-rpath,$PREFIX/lib \
 *        -lggml -lggml-base -lggml-cpu -lm -o seed_loop
 *     ./seed_loop --fix none|clear|dup [--iterations N] [--memory quarantine|stock]
 *
 * MLP 16->32->4, batch 8, ReLU, cross-entropy, SGD lr 0.5. Static context: W1, b1, W2, b2
 * (params), the loss-gradient accumulator, sgd_params. gf = forward graph; gb =
 * ggml_graph_dup(gf) + ggml_build_backward_expand + one ggml_opt_step_sgd per param
 * (ggml-opt's gb_opt). One ggml_backend_sched (CPU, 1 thread), per step:
 * sched_reset; [fix]; sched_alloc_graph; upload the batch; compute.
 *
 * Two private ggml layouts are used, each checked against ggml's public accessors before use
 * (the installed headers do not describe them): struct ggml_backend_buffer_type, to make the
 * scheduler's quarantining copy of the CPU buffer type (freed buffers keep their memory, as in
 * the golden harness; with --memory stock the no-fix loop dies in its first backward step,
 * as the golden C harness did), and the head of struct ggml_cgraph, to read a graph's leafs
 * for ggml-opt's dup_graph.
 *
 * The data come from a small deterministic generator (splitmix64, Box-Muller), so the numbers
 * differ from seed_loop.py's; each compute is checked against a double-precision reference of
 * the same step with the golden match rule and printed as "record {json}", then
 * "trajectory {json}".
 */
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_IN 16
#define N_HIDDEN 32
#define N_OUT 4
#define BATCH 8
#define LR 0.5f
#define MAX_ITER 64
#define MAX_MAPPED 256

/* -- private layouts, checked before use ------------------------------------------------ */

/* struct ggml_backend_buffer_type (ggml-backend-impl.h) */
struct vz_buft {
    struct {
        const char *(*get_name)(ggml_backend_buffer_type_t);
        ggml_backend_buffer_t (*alloc_buffer)(ggml_backend_buffer_type_t, size_t);
        size_t (*get_alignment)(ggml_backend_buffer_type_t);
        size_t (*get_max_size)(ggml_backend_buffer_type_t);
        size_t (*get_alloc_size)(ggml_backend_buffer_type_t, const struct ggml_tensor *);
        bool (*is_host)(ggml_backend_buffer_type_t);
    } iface;
    void *device;
    void *context;
};

/* the head of struct ggml_cgraph (ggml-impl.h) */
struct vz_cgraph_head {
    int size, n_nodes, n_leafs;
    struct ggml_tensor **nodes, **grads, **grad_accs, **leafs;
};

static void fail(const char *what) {
    fprintf(stderr, "seed_loop: %s\n", what);
    exit(2);
}

static struct vz_buft g_quarantine;
static ggml_backend_buffer_t (*g_cpu_alloc)(ggml_backend_buffer_type_t, size_t);

/* the CPU buffer type's allocation; ggml freeing the buffer later does not release the
 * memory: a buffer starts with its iface, whose first member is free_buffer */
static ggml_backend_buffer_t quarantine_alloc(ggml_backend_buffer_type_t buft, size_t size) {
    ggml_backend_buffer_t buffer = g_cpu_alloc(buft, size);
    if (buffer == NULL) return NULL;
    if (ggml_backend_buffer_get_type(buffer) != buft || ggml_backend_buffer_get_size(buffer) != size)
        fail("the CPU buffer does not have the layout this program knows (ggml-backend-impl.h)");
    *(void **)buffer = NULL;
    return buffer;
}

static ggml_backend_buffer_type_t quarantine_buft(void) {
    ggml_backend_buffer_type_t cpu = ggml_backend_cpu_buffer_type();
    memcpy(&g_quarantine, cpu, sizeof g_quarantine);
    ggml_backend_buffer_type_t q = (ggml_backend_buffer_type_t)&g_quarantine;
    if (strcmp(ggml_backend_buft_name(q), ggml_backend_buft_name(cpu)) != 0 ||
        ggml_backend_buft_get_alignment(q) != ggml_backend_buft_get_alignment(cpu) ||
        ggml_backend_buft_is_host(q) != ggml_backend_buft_is_host(cpu))
        fail("the CPU buffer type does not have the layout this program knows (ggml-backend-impl.h)");
    g_cpu_alloc = g_quarantine.iface.alloc_buffer;
    g_quarantine.iface.alloc_buffer = quarantine_alloc;
    return q;
}

static struct vz_cgraph_head *graph_head(struct ggml_cgraph *g) {
    struct vz_cgraph_head *h = (struct vz_cgraph_head *)g;
    if (h->n_nodes != ggml_graph_n_nodes(g) || h->nodes != ggml_graph_nodes(g) || h->size != ggml_graph_size(g))
        fail("struct ggml_cgraph does not have the layout this program knows (ggml-impl.h)");
    return h;
}

/* -- data and the double-precision reference --------------------------------------------- */

typedef struct {
    float W1[N_HIDDEN * N_IN], b1[N_HIDDEN], W2[N_OUT * N_HIDDEN], b2[N_OUT];
} params;

typedef struct {
    float x[BATCH * N_IN], labels[BATCH * N_OUT];
} batch;

static uint64_t g_rng = 0x5eed;

static double uniform01(void) {
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return ((z >> 11) + 0.5) / 9007199254740992.0;
}

static double normal(void) {
    return sqrt(-2.0 * log(uniform01())) * cos(6.283185307179586 * uniform01());
}

static void init_params(params *p) {
    for (int i = 0; i < N_HIDDEN * N_IN; i++) p->W1[i] = (float)(normal() / sqrt(N_IN));
    for (int i = 0; i < N_OUT * N_HIDDEN; i++) p->W2[i] = (float)(normal() / sqrt(N_HIDDEN));
    memset(p->b1, 0, sizeof p->b1);
    memset(p->b2, 0, sizeof p->b2);
}

static void make_batches(batch *out, int n) {
    double teacher[N_OUT][N_IN];
    for (int c = 0; c < N_OUT; c++)
        for (int i = 0; i < N_IN; i++) teacher[c][i] = normal();
    for (int k = 0; k < n; k++) {
        batch *bt = &out[k];
        memset(bt->labels, 0, sizeof bt->labels);
        for (int b = 0; b < BATCH; b++) {
            for (int i = 0; i < N_IN; i++) bt->x[b * N_IN + i] = (float)normal();
            int best = 0;
            double best_score = -INFINITY;
            for (int c = 0; c < N_OUT; c++) {
                double s = 0;
                for (int i = 0; i < N_IN; i++) s += bt->x[b * N_IN + i] * teacher[c][i];
                if (s > best_score) best_score = s, best = c;
            }
            bt->labels[b * N_OUT + best] = 1.0f;
        }
    }
}

/* loss and logits of the forward pass, and the parameters after the SGD step (ggml's
 * cross_entropy_loss is the mean over rows) */
static double reference_step(const params *p, const batch *bt, double logits[BATCH * N_OUT], double after[],
                             int n_after) {
    double h_pre[BATCH][N_HIDDEN], h[BATCH][N_HIDDEN], g[BATCH][N_OUT], gh[BATCH][N_HIDDEN], loss = 0;
    for (int b = 0; b < BATCH; b++) {
        for (int j = 0; j < N_HIDDEN; j++) {
            double s = p->b1[j];
            for (int i = 0; i < N_IN; i++) s += (double)bt->x[b * N_IN + i] * p->W1[j * N_IN + i];
            h_pre[b][j] = s;
            h[b][j] = s > 0 ? s : 0;
        }
        double mx = -INFINITY, sum = 0;
        for (int c = 0; c < N_OUT; c++) {
            double s = p->b2[c];
            for (int j = 0; j < N_HIDDEN; j++) s += h[b][j] * p->W2[c * N_HIDDEN + j];
            logits[b * N_OUT + c] = s;
            if (s > mx) mx = s;
        }
        for (int c = 0; c < N_OUT; c++) sum += exp(logits[b * N_OUT + c] - mx);
        for (int c = 0; c < N_OUT; c++) {
            double log_softmax = logits[b * N_OUT + c] - mx - log(sum);
            loss -= bt->labels[b * N_OUT + c] * log_softmax / BATCH;
            g[b][c] = (exp(log_softmax) - bt->labels[b * N_OUT + c]) / BATCH;
        }
        for (int j = 0; j < N_HIDDEN; j++) {
            double s = 0;
            for (int c = 0; c < N_OUT; c++) s += g[b][c] * p->W2[c * N_HIDDEN + j];
            gh[b][j] = h_pre[b][j] > 0 ? s : 0;
        }
    }
    /* after = W1, b1, W2, b2 flattened */
    if (n_after != N_HIDDEN * N_IN + N_HIDDEN + N_OUT * N_HIDDEN + N_OUT) fail("reference: wrong size");
    double *a = after;
    for (int j = 0; j < N_HIDDEN; j++)
        for (int i = 0; i < N_IN; i++) {
            double s = 0;
            for (int b = 0; b < BATCH; b++) s += gh[b][j] * bt->x[b * N_IN + i];
            *a++ = p->W1[j * N_IN + i] - LR * s;
        }
    for (int j = 0; j < N_HIDDEN; j++) {
        double s = 0;
        for (int b = 0; b < BATCH; b++) s += gh[b][j];
        *a++ = p->b1[j] - LR * s;
    }
    for (int c = 0; c < N_OUT; c++)
        for (int j = 0; j < N_HIDDEN; j++) {
            double s = 0;
            for (int b = 0; b < BATCH; b++) s += g[b][c] * h[b][j];
            *a++ = p->W2[c * N_HIDDEN + j] - LR * s;
        }
    for (int c = 0; c < N_OUT; c++) {
        double s = 0;
        for (int b = 0; b < BATCH; b++) s += g[b][c];
        *a++ = p->b2[c] - LR * s;
    }
    return loss;
}

#define N_PARAMS (N_HIDDEN * N_IN + N_HIDDEN + N_OUT * N_HIDDEN + N_OUT)

static void flatten(const params *p, double out[N_PARAMS]) {
    int k = 0;
    for (int i = 0; i < N_HIDDEN * N_IN; i++) out[k++] = p->W1[i];
    for (int i = 0; i < N_HIDDEN; i++) out[k++] = p->b1[i];
    for (int i = 0; i < N_OUT * N_HIDDEN; i++) out[k++] = p->W2[i];
    for (int i = 0; i < N_OUT; i++) out[k++] = p->b2[i];
}

static void unflatten(const double in[N_PARAMS], params *p) {
    int k = 0;
    for (int i = 0; i < N_HIDDEN * N_IN; i++) p->W1[i] = (float)in[k++];
    for (int i = 0; i < N_HIDDEN; i++) p->b1[i] = (float)in[k++];
    for (int i = 0; i < N_OUT * N_HIDDEN; i++) p->W2[i] = (float)in[k++];
    for (int i = 0; i < N_OUT; i++) p->b2[i] = (float)in[k++];
}

/* -- the ggml program ------------------------------------------------------------------------ */

typedef struct {
    struct ggml_context *ctx_static, *ctx;
    ggml_backend_buffer_t buf_static;
    struct ggml_tensor *W1, *b1, *W2, *b2, *loss_grad_acc, *sgd_params;
    struct ggml_tensor *x, *labels, *logits, *loss;
    struct ggml_cgraph *gf, *gb;
} net;

static struct ggml_tensor *named(struct ggml_tensor *t, const char *name) {
    ggml_set_name(t, name);
    return t;
}

static void get_params(const net *n, params *p) {
    ggml_backend_tensor_get(n->W1, p->W1, 0, sizeof p->W1);
    ggml_backend_tensor_get(n->b1, p->b1, 0, sizeof p->b1);
    ggml_backend_tensor_get(n->W2, p->W2, 0, sizeof p->W2);
    ggml_backend_tensor_get(n->b2, p->b2, 0, sizeof p->b2);
}

static void build_net(net *n, const params *init) {
    size_t overhead = ggml_tensor_overhead();
    struct ggml_init_params sp = {overhead * 8, NULL, true};
    struct ggml_context *cs = n->ctx_static = ggml_init(sp);
    n->W1 = named(ggml_new_tensor_2d(cs, GGML_TYPE_F32, N_IN, N_HIDDEN), "W1");
    n->b1 = named(ggml_new_tensor_1d(cs, GGML_TYPE_F32, N_HIDDEN), "b1");
    n->W2 = named(ggml_new_tensor_2d(cs, GGML_TYPE_F32, N_HIDDEN, N_OUT), "W2");
    n->b2 = named(ggml_new_tensor_1d(cs, GGML_TYPE_F32, N_OUT), "b2");
    ggml_set_param(n->W1);
    ggml_set_param(n->b1);
    ggml_set_param(n->W2);
    ggml_set_param(n->b2);
    n->loss_grad_acc = named(ggml_new_tensor_1d(cs, GGML_TYPE_F32, 1), "loss_grad_acc");
    n->sgd_params = named(ggml_new_tensor_1d(cs, GGML_TYPE_F32, 2), "sgd_params");
    n->buf_static = ggml_backend_alloc_ctx_tensors_from_buft(cs, ggml_backend_cpu_buffer_type());
    if (n->buf_static == NULL) fail("could not allocate the static buffer");
    ggml_backend_tensor_set(n->W1, init->W1, 0, sizeof init->W1);
    ggml_backend_tensor_set(n->b1, init->b1, 0, sizeof init->b1);
    ggml_backend_tensor_set(n->W2, init->W2, 0, sizeof init->W2);
    ggml_backend_tensor_set(n->b2, init->b2, 0, sizeof init->b2);
    const float sgd[2] = {LR, 0.0f}; /* lr, weight decay */
    ggml_backend_tensor_set(n->sgd_params, sgd, 0, sizeof sgd);

    struct ggml_init_params cp = {overhead * 64 + 2 * ggml_graph_overhead_custom(GGML_DEFAULT_GRAPH_SIZE, true), NULL,
                                  true};
    struct ggml_context *ctx = n->ctx = ggml_init(cp);
    n->x = named(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, N_IN, BATCH), "x");
    ggml_set_input(n->x);
    n->labels = named(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, N_OUT, BATCH), "labels");
    ggml_set_input(n->labels);
    struct ggml_tensor *h_mm = named(ggml_mul_mat(ctx, n->W1, n->x), "h_mm");
    struct ggml_tensor *h_pre = named(ggml_add(ctx, h_mm, n->b1), "h_pre");
    struct ggml_tensor *h = named(ggml_relu(ctx, h_pre), "h");
    struct ggml_tensor *o_mm = named(ggml_mul_mat(ctx, n->W2, h), "o_mm");
    n->logits = named(ggml_add(ctx, o_mm, n->b2), "logits");
    ggml_set_output(n->logits);
    n->loss = named(ggml_cross_entropy_loss(ctx, n->logits, n->labels), "loss");
    ggml_set_output(n->loss);
    ggml_set_loss(n->loss);

    n->gf = ggml_new_graph_custom(ctx, GGML_DEFAULT_GRAPH_SIZE, true);
    ggml_build_forward_expand(n->gf, n->loss);
    n->gb = ggml_graph_dup(ctx, n->gf, true);
    int n_forward = ggml_graph_n_nodes(n->gf);
    static struct ggml_tensor *grad_accs[GGML_DEFAULT_GRAPH_SIZE];
    for (int i = 0; i < n_forward; i++)
        if (ggml_graph_node(n->gf, i) == n->loss) grad_accs[i] = n->loss_grad_acc;
    ggml_build_backward_expand(ctx, n->gb, grad_accs);
    /* one SGD step per parameter, going backwards over the forward nodes (ggml-opt's order) */
    for (int i = n_forward - 1; i >= 0; i--) {
        struct ggml_tensor *node = ggml_graph_node(n->gb, i);
        if (!(node->flags & GGML_TENSOR_FLAG_PARAM)) continue;
        struct ggml_tensor *grad = ggml_graph_get_grad(n->gb, node);
        if (grad == NULL) continue;
        struct ggml_tensor *step = ggml_opt_step_sgd(ctx, node, grad, n->sgd_params);
        ggml_format_name(step, "sgd step for %s", node->name);
        ggml_build_forward_expand(n->gb, step);
    }
    ggml_graph_reset(n->gb); /* the loss gradient accumulator starts at 1 */
}

/* ggml-opt's dup_graph (src/ggml-opt.cpp), without the gradient table (only building a
 * backward pass reads it, allocation and compute do not) */
typedef struct {
    struct ggml_tensor *from[MAX_MAPPED], *to[MAX_MAPPED];
    int n;
} tensor_map;

static struct ggml_tensor *map_tensor(tensor_map *m, struct ggml_context *ctx, struct ggml_tensor *t) {
    if (t == NULL) return NULL;
    for (int i = 0; i < m->n; i++)
        if (m->from[i] == t) return m->to[i];
    if (m->n == MAX_MAPPED) fail("dup_graph: too many tensors");
    struct ggml_tensor *c = ggml_dup_tensor(ctx, t);
    m->from[m->n] = t;
    m->to[m->n++] = c;
    c->op = t->op;
    for (int i = 0; i < GGML_MAX_DIMS; i++) c->nb[i] = t->nb[i];
    c->flags = t->flags;
    memcpy(c->op_params, t->op_params, sizeof t->op_params);
    strcpy(c->name, t->name);
    c->data = t->data;
    c->buffer = t->buffer;
    c->extra = t->extra;
    c->view_offs = t->view_offs;
    c->view_src = map_tensor(m, ctx, t->view_src);
    for (int i = 0; i < GGML_MAX_SRC; i++) c->src[i] = map_tensor(m, ctx, t->src[i]);
    return c;
}

static struct ggml_cgraph *dup_graph(struct ggml_context *ctx, struct ggml_cgraph *src, tensor_map *m) {
    struct vz_cgraph_head *s = graph_head(src);
    struct ggml_cgraph *dst = ggml_new_graph_custom(ctx, (size_t)s->size, true);
    for (int i = 0; i < s->n_leafs; i++) ggml_build_forward_expand(dst, map_tensor(m, ctx, s->leafs[i]));
    if (graph_head(dst)->n_leafs != s->n_leafs) fail("dup_graph: the copy has another number of leafs");
    for (int i = 0; i < s->n_nodes; i++) ggml_build_forward_expand(dst, map_tensor(m, ctx, s->nodes[i]));
    if (ggml_graph_n_nodes(dst) != s->n_nodes) fail("dup_graph: the copy has another number of nodes");
    return dst;
}

static struct ggml_tensor *mapped(const tensor_map *m, struct ggml_tensor *t) {
    for (int i = 0; i < m->n; i++)
        if (m->from[i] == t) return m->to[i];
    fail("dup_graph: a tensor was not copied");
    return NULL;
}

static double max_abs_diff(const double *a, const double *b, int n) {
    double d = 0;
    for (int i = 0; i < n; i++) d = fmax(d, fabs(a[i] - b[i]));
    return d;
}

int main(int argc, char **argv) {
    const char *fix = "none", *memory = "quarantine";
    int iterations = 3;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--fix") == 0 && i + 1 < argc) fix = argv[++i];
        else if (strcmp(argv[i], "--iterations") == 0 && i + 1 < argc) iterations = atoi(argv[++i]);
        else if (strcmp(argv[i], "--memory") == 0 && i + 1 < argc) memory = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--fix none|clear|dup] [--iterations N] [--memory quarantine|stock]\n", argv[0]);
            return 2;
        }
    }
    if (strcmp(fix, "none") != 0 && strcmp(fix, "clear") != 0 && strcmp(fix, "dup") != 0) fail("--fix: none, clear or dup");
    if (strcmp(memory, "quarantine") != 0 && strcmp(memory, "stock") != 0) fail("--memory: quarantine or stock");
    if (iterations < 1 || iterations > MAX_ITER) fail("--iterations: 1 to 64");

    static params init;
    static batch batches[MAX_ITER];
    init_params(&init);
    make_batches(batches, iterations);

    static net n;
    build_net(&n, &init);
    ggml_backend_t backend = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(backend, 1);
    ggml_backend_buffer_type_t buft = strcmp(memory, "quarantine") == 0 ? quarantine_buft() : ggml_backend_cpu_buffer_type();
    ggml_backend_sched_t sched = ggml_backend_sched_new(&backend, &buft, 1, GGML_DEFAULT_GRAPH_SIZE, false, false);

    struct ggml_context *copies[2 * MAX_ITER];
    int n_copies = 0, record = 0, n_wrong = 0, wrong[2 * MAX_ITER];
    double losses[MAX_ITER];
    for (int it = 0; it < iterations; it++) {
        static params before, now;
        static double after_ref[N_PARAMS], after[N_PARAMS], logits_ref[BATCH * N_OUT];
        get_params(&n, &before);
        double loss_ref = reference_step(&before, &batches[it], logits_ref, after_ref, N_PARAMS);
        for (int backward = 0; backward < 2; backward++) {
            struct ggml_cgraph *g = backward ? n.gb : n.gf;
            struct ggml_tensor *t_x = n.x, *t_labels = n.labels, *t_loss = n.loss, *t_logits = n.logits;
            ggml_backend_sched_reset(sched);
            if (strcmp(fix, "clear") == 0) {
                for (struct ggml_tensor *t = ggml_get_first_tensor(n.ctx); t; t = ggml_get_next_tensor(n.ctx, t)) {
                    t->data = NULL;
                    t->buffer = NULL;
                    t->extra = NULL;
                }
            } else if (strcmp(fix, "dup") == 0) {
                struct ggml_init_params cp = {
                    ggml_tensor_overhead() * 64 + ggml_graph_overhead_custom(GGML_DEFAULT_GRAPH_SIZE, true), NULL, true};
                struct ggml_context *copy_ctx = copies[n_copies++] = ggml_init(cp);
                static tensor_map m;
                m.n = 0;
                g = dup_graph(copy_ctx, g, &m);
                t_x = mapped(&m, n.x), t_labels = mapped(&m, n.labels);
                t_loss = mapped(&m, n.loss), t_logits = mapped(&m, n.logits);
            }
            if (!ggml_backend_sched_alloc_graph(sched, g)) fail("sched_alloc_graph failed");
            ggml_backend_tensor_set(t_x, batches[it].x, 0, sizeof batches[it].x);
            ggml_backend_tensor_set(t_labels, batches[it].labels, 0, sizeof batches[it].labels);
            if (ggml_backend_sched_graph_compute(sched, g) != GGML_STATUS_SUCCESS) fail("compute failed");
            float loss, logits[BATCH * N_OUT];
            double logits64[BATCH * N_OUT];
            ggml_backend_tensor_get(t_loss, &loss, 0, sizeof loss);
            ggml_backend_tensor_get(t_logits, logits, 0, sizeof logits);
            for (int i = 0; i < BATCH * N_OUT; i++) logits64[i] = logits[i];
            double params_diff = 0;
            if (backward) {
                get_params(&n, &now);
                flatten(&now, after);
                params_diff = max_abs_diff(after, after_ref, N_PARAMS);
            } else {
                losses[it] = loss;
            }
            double loss_diff = fabs(loss - loss_ref), logits_diff = max_abs_diff(logits64, logits_ref, BATCH * N_OUT);
            bool match = loss_diff <= 1e-5 * fmax(1.0, fabs(loss_ref)) && logits_diff <= 1e-4 && params_diff <= 1e-5;
            if (!match) wrong[n_wrong++] = record;
            printf("record {\"record\": %d, \"iteration\": %d, \"graph\": \"%s\", \"loss\": %.9g, \"loss_ref\": %.9g, "
                   "\"loss_abs_diff\": %.9g, \"logits_max_abs_diff\": %.9g, \"params_after_max_abs_diff\": %.9g, "
                   "\"match\": %s, \"buffer_size\": %zu}\n",
                   record, it, backward ? "backward" : "forward", loss, loss_ref, loss_diff, logits_diff, params_diff,
                   match ? "true" : "false", ggml_backend_sched_get_buffer_size(sched, backend));
            fflush(stdout);
            record++;
        }
    }

    /* an independent reference training run from the same initial parameters and batches */
    static params ref;
    static double ref_flat[N_PARAMS], final_flat[N_PARAMS], logits_scratch[BATCH * N_OUT];
    double ref_losses[MAX_ITER];
    ref = init;
    for (int it = 0; it < iterations; it++) {
        ref_losses[it] = reference_step(&ref, &batches[it], logits_scratch, ref_flat, N_PARAMS);
        unflatten(ref_flat, &ref);
    }
    static params final;
    get_params(&n, &final);
    flatten(&final, final_flat);
    printf("trajectory {\"loss\": [");
    for (int it = 0; it < iterations; it++) printf("%s%.9g", it ? ", " : "", losses[it]);
    printf("], \"loss_reference_trajectory\": [");
    for (int it = 0; it < iterations; it++) printf("%s%.9g", it ? ", " : "", ref_losses[it]);
    printf("], \"final_params_max_abs_diff_vs_reference_trajectory\": %.9g, \"corrupted\": %s, \"mismatching_records\": [",
           max_abs_diff(final_flat, ref_flat, N_PARAMS), n_wrong ? "true" : "false");
    for (int i = 0; i < n_wrong; i++) printf("%s%d", i ? ", " : "", wrong[i]);
    printf("]}\n");

    ggml_backend_sched_free(sched);
    ggml_backend_free(backend);
    for (int i = 0; i < n_copies; i++) ggml_free(copies[i]);
    ggml_free(n.ctx);
    ggml_backend_buffer_free(n.buf_static);
    ggml_free(n.ctx_static);
    return 0;
}
