//go:build linux && cgo && verbs

#include "ibv.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

// The exported libibverbs functions the transport calls, resolved by
// ftv_load. The data-path verbs (post_send, post_recv, poll_cq,
// req_notify_cq) are inline functions of verbs.h that call through the
// context's provider table and need no symbol.
static struct {
	struct ibv_device **(*get_device_list)(int *);
	void (*free_device_list)(struct ibv_device **);
	const char *(*get_device_name)(struct ibv_device *);
	struct ibv_context *(*open_device)(struct ibv_device *);
	int (*close_device)(struct ibv_context *);
	int (*query_device)(struct ibv_context *, struct ibv_device_attr *);
	int (*query_port)(struct ibv_context *, uint8_t, struct _compat_ibv_port_attr *);
	int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
	struct ibv_pd *(*alloc_pd)(struct ibv_context *);
	int (*dealloc_pd)(struct ibv_pd *);
	struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
	int (*dereg_mr)(struct ibv_mr *);
	struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *);
	int (*destroy_comp_channel)(struct ibv_comp_channel *);
	struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *, int);
	int (*destroy_cq)(struct ibv_cq *);
	int (*get_cq_event)(struct ibv_comp_channel *, struct ibv_cq **, void **);
	void (*ack_cq_events)(struct ibv_cq *, unsigned int);
	struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
	int (*destroy_qp)(struct ibv_qp *);
	int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
	const char *(*wc_status_str)(enum ibv_wc_status);
} fn;

int ftv_load(char *err, int errlen) {
	void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (!h) {
		snprintf(err, errlen, "%s", dlerror());
		return -1;
	}
#define SYM(field, name)                                                         \
	do {                                                                       \
		*(void **)(&fn.field) = dlsym(h, name);                            \
		if (!fn.field) {                                                   \
			snprintf(err, errlen, "libibverbs.so.1 lacks %s", name);   \
			return -1;                                                 \
		}                                                                  \
	} while (0)
	SYM(get_device_list, "ibv_get_device_list");
	SYM(free_device_list, "ibv_free_device_list");
	SYM(get_device_name, "ibv_get_device_name");
	SYM(open_device, "ibv_open_device");
	SYM(close_device, "ibv_close_device");
	SYM(query_device, "ibv_query_device");
	SYM(query_port, "ibv_query_port");
	SYM(query_gid, "ibv_query_gid");
	SYM(alloc_pd, "ibv_alloc_pd");
	SYM(dealloc_pd, "ibv_dealloc_pd");
	SYM(reg_mr, "ibv_reg_mr");
	SYM(dereg_mr, "ibv_dereg_mr");
	SYM(create_comp_channel, "ibv_create_comp_channel");
	SYM(destroy_comp_channel, "ibv_destroy_comp_channel");
	SYM(create_cq, "ibv_create_cq");
	SYM(destroy_cq, "ibv_destroy_cq");
	SYM(get_cq_event, "ibv_get_cq_event");
	SYM(ack_cq_events, "ibv_ack_cq_events");
	SYM(create_qp, "ibv_create_qp");
	SYM(destroy_qp, "ibv_destroy_qp");
	SYM(modify_qp, "ibv_modify_qp");
	SYM(wc_status_str, "ibv_wc_status_str");
#undef SYM
	return 0;
}

struct ibv_device **ftv_get_device_list(int *n) { return fn.get_device_list(n); }
void ftv_free_device_list(struct ibv_device **l) { fn.free_device_list(l); }
const char *ftv_device_name(struct ibv_device *d) { return fn.get_device_name(d); }
struct ibv_context *ftv_open_device(struct ibv_device *d) { return fn.open_device(d); }
int ftv_close_device(struct ibv_context *c) { return fn.close_device(c); }

int ftv_query(struct ibv_context *c, int port, ftv_devinfo *out) {
	struct ibv_device_attr da;
	memset(&da, 0, sizeof da);
	if (fn.query_device(c, &da))
		return -errno;
	// Through the provider's extended query_port when it has one (as verbs.h
	// does), else the compatibility entry point.
	struct ibv_port_attr pa;
	memset(&pa, 0, sizeof pa);
	struct verbs_context *vctx = verbs_get_ctx_op(c, query_port);
	int rc = vctx ? vctx->query_port(c, port, &pa, sizeof pa)
	              : fn.query_port(c, port, (struct _compat_ibv_port_attr *)&pa);
	if (rc)
		return rc < 0 ? rc : -rc;
	out->atomic_cap = da.atomic_cap;
	out->max_qp_wr = da.max_qp_wr;
	out->max_cqe = da.max_cqe;
	out->max_qp_rd_atom = da.max_qp_rd_atom;
	out->max_qp_init_rd_atom = da.max_qp_init_rd_atom;
	out->port_state = pa.state;
	out->active_mtu = pa.active_mtu;
	out->link_layer = pa.link_layer;
	out->lid = pa.lid;
	out->gid_tbl_len = pa.gid_tbl_len;
	return 0;
}

int ftv_query_gid(struct ibv_context *c, int port, int index, uint8_t gid[16]) {
	union ibv_gid g;
	if (fn.query_gid(c, port, index, &g))
		return -errno;
	memcpy(gid, g.raw, 16);
	return 0;
}

struct ibv_pd *ftv_alloc_pd(struct ibv_context *c) { return fn.alloc_pd(c); }
int ftv_dealloc_pd(struct ibv_pd *pd) { return fn.dealloc_pd(pd); }

struct ibv_mr *ftv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
	return fn.reg_mr(pd, addr, len, access);
}
int ftv_dereg_mr(struct ibv_mr *mr) { return fn.dereg_mr(mr); }
uint32_t ftv_mr_lkey(struct ibv_mr *mr) { return mr->lkey; }
uint32_t ftv_mr_rkey(struct ibv_mr *mr) { return mr->rkey; }

struct ibv_comp_channel *ftv_create_channel(struct ibv_context *c) {
	struct ibv_comp_channel *ch = fn.create_comp_channel(c);
	if (!ch)
		return NULL;
	int fl = fcntl(ch->fd, F_GETFL);
	if (fl < 0 || fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		fn.destroy_comp_channel(ch);
		return NULL;
	}
	return ch;
}
int ftv_channel_fd(struct ibv_comp_channel *ch) { return ch->fd; }
int ftv_destroy_channel(struct ibv_comp_channel *ch) { return fn.destroy_comp_channel(ch); }

struct ibv_cq *ftv_create_cq(struct ibv_context *c, int cqe, struct ibv_comp_channel *ch) {
	return fn.create_cq(c, cqe, NULL, ch, 0);
}
int ftv_destroy_cq(struct ibv_cq *cq) { return fn.destroy_cq(cq); }
int ftv_req_notify(struct ibv_cq *cq) { return ibv_req_notify_cq(cq, 0); }

int ftv_get_event(struct ibv_comp_channel *ch, struct ibv_cq **cq) {
	void *ctx;
	if (fn.get_cq_event(ch, cq, &ctx) == 0)
		return 1;
	return errno == EAGAIN ? 0 : -errno;
}
void ftv_ack_events(struct ibv_cq *cq, unsigned int n) { fn.ack_cq_events(cq, n); }

int ftv_poll(struct ibv_cq *cq, int n, ftv_wc *out) {
	struct ibv_wc wc[32];
	if (n > 32)
		n = 32;
	int got = ibv_poll_cq(cq, n, wc);
	for (int i = 0; i < got; i++) {
		out[i].wr_id = wc[i].wr_id;
		out[i].status = wc[i].status;
		out[i].opcode = wc[i].opcode;
		out[i].byte_len = wc[i].byte_len;
		out[i].vendor_err = wc[i].vendor_err;
		out[i].qp_num = wc[i].qp_num;
	}
	return got;
}

static int64_t now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int ftv_poll_spin(struct ibv_cq *cq, int n, ftv_wc *out, int64_t spin_ns) {
	int64_t deadline = now_ns() + spin_ns;
	for (unsigned i = 0;; i++) {
		int got = ftv_poll(cq, n, out);
		if (got != 0)
			return got;
		// The clock is read every 16 polls: a poll of an empty queue is a
		// few loads, the clock a vDSO call.
		if ((i & 15) == 15 && now_ns() >= deadline)
			return 0;
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#endif
	}
}
const char *ftv_status_str(int status) { return fn.wc_status_str((enum ibv_wc_status)status); }

struct ibv_qp *ftv_create_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq,
                             int max_send, int max_recv, int max_inline, int *got_inline) {
	struct ibv_qp_init_attr ia;
	memset(&ia, 0, sizeof ia);
	ia.send_cq = scq;
	ia.recv_cq = rcq;
	ia.qp_type = IBV_QPT_RC;
	ia.sq_sig_all = 0;
	ia.cap.max_send_wr = max_send;
	ia.cap.max_recv_wr = max_recv;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	ia.cap.max_inline_data = max_inline;
	struct ibv_qp *qp = fn.create_qp(pd, &ia);
	if (!qp && max_inline > 0) { // the device may refuse inline data: go without
		ia.cap.max_inline_data = 0;
		qp = fn.create_qp(pd, &ia);
	}
	if (qp)
		*got_inline = ia.cap.max_inline_data;
	return qp;
}
int ftv_destroy_qp(struct ibv_qp *qp) { return fn.destroy_qp(qp); }
uint32_t ftv_qp_num(struct ibv_qp *qp) { return qp->qp_num; }

int ftv_qp_init(struct ibv_qp *qp, int port) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = port;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	if (fn.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return errno ? errno : EINVAL;
	return 0;
}

int ftv_qp_rtr(struct ibv_qp *qp, int port, int mtu, uint32_t rqpn, uint32_t rpsn,
               int global, const uint8_t rgid[16], int sgid_index, int rlid, int rd_atom) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = mtu;
	a.dest_qp_num = rqpn;
	a.rq_psn = rpsn;
	a.max_dest_rd_atomic = rd_atom;
	a.min_rnr_timer = 1; // 0.01 ms: a receiver short of buffers reposts at once
	a.ah_attr.port_num = port;
	a.ah_attr.dlid = rlid;
	if (global) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, rgid, 16);
		a.ah_attr.grh.sgid_index = sgid_index;
		a.ah_attr.grh.hop_limit = 64;
	}
	if (fn.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
	                             IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return errno ? errno : EINVAL;
	return 0;
}

int ftv_qp_rts(struct ibv_qp *qp, uint32_t psn, int timeout, int retry, int rnr_retry, int rd_atom) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = psn;
	a.timeout = timeout;
	a.retry_cnt = retry;
	a.rnr_retry = rnr_retry;
	a.max_rd_atomic = rd_atom;
	if (fn.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
	                             IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
		return errno ? errno : EINVAL;
	return 0;
}

int ftv_qp_error(struct ibv_qp *qp) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_ERR;
	if (fn.modify_qp(qp, &a, IBV_QP_STATE))
		return errno ? errno : EINVAL;
	return 0;
}

// prepare fills a signaled send work request of one scatter entry.
static void prepare(struct ibv_send_wr *wr, struct ibv_sge *sge, uint64_t wr_id, int opcode,
                    uint64_t laddr, uint32_t len, uint32_t lkey, int flags) {
	sge->addr = laddr;
	sge->length = len;
	sge->lkey = lkey;
	memset(wr, 0, sizeof *wr);
	wr->wr_id = wr_id;
	wr->sg_list = sge;
	wr->num_sge = 1;
	wr->opcode = opcode;
	wr->send_flags = IBV_SEND_SIGNALED | flags;
}

static int post(struct ibv_qp *qp, struct ibv_send_wr *wr) {
	struct ibv_send_wr *bad = NULL;
	return ibv_post_send(qp, wr, &bad);
}

// post_poll posts wr and, when it was taken and cq is set, polls cq once.
static int post_poll(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_cq *cq, ftv_wc *out, int *got) {
	int rc = post(qp, wr);
	*got = 0;
	if (rc == 0 && cq) {
		int n = ftv_poll(cq, 32, out);
		*got = n > 0 ? n : 0;
	}
	return rc;
}

int ftv_post_rdma(struct ibv_qp *qp, uint64_t wr_id, int opcode, uint64_t laddr, uint32_t len,
                  uint32_t lkey, uint64_t raddr, uint32_t rkey, int flags,
                  struct ibv_cq *cq, ftv_wc *out, int *got) {
	struct ibv_sge sge;
	struct ibv_send_wr wr;
	prepare(&wr, &sge, wr_id, opcode, laddr, len, lkey, flags);
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return post_poll(qp, &wr, cq, out, got);
}

int ftv_post_atomic(struct ibv_qp *qp, uint64_t wr_id, int opcode, uint64_t laddr, uint32_t lkey,
                    uint64_t raddr, uint32_t rkey, uint64_t compare_add, uint64_t swap, int flags,
                    struct ibv_cq *cq, ftv_wc *out, int *got) {
	struct ibv_sge sge;
	struct ibv_send_wr wr;
	prepare(&wr, &sge, wr_id, opcode, laddr, 8, lkey, flags);
	wr.wr.atomic.remote_addr = raddr;
	wr.wr.atomic.rkey = rkey;
	wr.wr.atomic.compare_add = compare_add;
	wr.wr.atomic.swap = swap;
	return post_poll(qp, &wr, cq, out, got);
}

int ftv_post_send(struct ibv_qp *qp, uint64_t wr_id, uint64_t laddr, uint32_t len, uint32_t lkey, int flags) {
	struct ibv_sge sge;
	struct ibv_send_wr wr;
	prepare(&wr, &sge, wr_id, IBV_WR_SEND, laddr, len, lkey, flags);
	return post(qp, &wr);
}

int ftv_post_recv(struct ibv_qp *qp, uint64_t wr_id, uint64_t laddr, uint32_t len, uint32_t lkey) {
	struct ibv_sge sge = {.addr = laddr, .length = len, .lkey = lkey};
	struct ibv_recv_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	return ibv_post_recv(qp, &wr, &bad);
}

void *ftv_alloc(size_t len) {
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}
void ftv_free(void *p, size_t len) { munmap(p, len); }
