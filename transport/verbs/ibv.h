//go:build linux && cgo && verbs

// The C side of the verbs transport: libibverbs is loaded with dlopen at run
// time (a verbs-enabled binary starts on hosts without it), and the few
// verbs the transport uses are wrapped here so Go never builds a union-heavy
// work request or touches a provider's function table itself.
#ifndef FTV_IBV_H
#define FTV_IBV_H

#include <stdint.h>
#include <infiniband/verbs.h>

// ftv_load opens libibverbs.so.1 and resolves its symbols; 0 on success,
// else -1 with a reason in err.
int ftv_load(char *err, int errlen);

// Device handling.
struct ibv_device **ftv_get_device_list(int *n);
void ftv_free_device_list(struct ibv_device **l);
const char *ftv_device_name(struct ibv_device *d);
struct ibv_context *ftv_open_device(struct ibv_device *d);
int ftv_close_device(struct ibv_context *c);

// ftv_devinfo is what the transport needs to know of a device and port.
typedef struct {
	int atomic_cap;     // enum ibv_atomic_cap
	int max_qp_wr;
	int max_cqe;
	int max_qp_rd_atom;
	int max_qp_init_rd_atom;
	int port_state;     // enum ibv_port_state
	int active_mtu;     // enum ibv_mtu
	int link_layer;     // IBV_LINK_LAYER_*
	int lid;
	int gid_tbl_len;
} ftv_devinfo;

int ftv_query(struct ibv_context *c, int port, ftv_devinfo *out);
int ftv_query_gid(struct ibv_context *c, int port, int index, uint8_t gid[16]);

struct ibv_pd *ftv_alloc_pd(struct ibv_context *c);
int ftv_dealloc_pd(struct ibv_pd *pd);
// ftv_reg_mr registers [addr, addr+len) with access (IBV_ACCESS_* flags).
struct ibv_mr *ftv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access);
int ftv_dereg_mr(struct ibv_mr *mr);
uint32_t ftv_mr_lkey(struct ibv_mr *mr);
uint32_t ftv_mr_rkey(struct ibv_mr *mr);

// Completion: a channel whose fd is non-blocking, and CQs on it.
struct ibv_comp_channel *ftv_create_channel(struct ibv_context *c);
int ftv_channel_fd(struct ibv_comp_channel *ch);
int ftv_destroy_channel(struct ibv_comp_channel *ch);
struct ibv_cq *ftv_create_cq(struct ibv_context *c, int cqe, struct ibv_comp_channel *ch);
int ftv_destroy_cq(struct ibv_cq *cq);
int ftv_req_notify(struct ibv_cq *cq);
// ftv_get_event takes one event off the channel: 1 and *cq set, 0 when none
// is ready (EAGAIN), -errno on error.
int ftv_get_event(struct ibv_comp_channel *ch, struct ibv_cq **cq);
void ftv_ack_events(struct ibv_cq *cq, unsigned int n);

// ftv_wc is the part of a work completion the transport reads.
typedef struct {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t byte_len;
	uint32_t vendor_err;
	uint32_t qp_num;
	uint32_t pad;
} ftv_wc;

// ftv_poll polls up to n completions into out; the count, or -1.
int ftv_poll(struct ibv_cq *cq, int n, ftv_wc *out);
// ftv_poll_spin busy-polls cq for up to spin_ns nanoseconds (one poll at
// least) and returns as soon as it finds completions: their count (up to n,
// in out), 0 when the time ran out, or -1.
int ftv_poll_spin(struct ibv_cq *cq, int n, ftv_wc *out, int64_t spin_ns);
const char *ftv_status_str(int status);

// Queue pairs.
struct ibv_qp *ftv_create_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq,
                             int max_send, int max_recv, int max_inline, int *got_inline);
int ftv_destroy_qp(struct ibv_qp *qp);
uint32_t ftv_qp_num(struct ibv_qp *qp);
int ftv_qp_init(struct ibv_qp *qp, int port);
int ftv_qp_rtr(struct ibv_qp *qp, int port, int mtu, uint32_t rqpn, uint32_t rpsn,
               int global, const uint8_t rgid[16], int sgid_index, int rlid, int rd_atom);
int ftv_qp_rts(struct ibv_qp *qp, uint32_t psn, int timeout, int retry, int rnr_retry, int rd_atom);
int ftv_qp_error(struct ibv_qp *qp);

// Posting. Every send-side work request is signaled; flags may add
// IBV_SEND_INLINE and IBV_SEND_FENCE. 0 or an errno.
//
// ftv_post_rdma and ftv_post_atomic poll cq once after a successful post
// when cq is not NULL (one call instead of two: a completion that is
// already there, as on Soft-RoCE, where the whole exchange of a write or an
// atomic often runs inside the post), storing up to 32 completions in out
// and their count in *got (0 when none, or when the post failed).
int ftv_post_rdma(struct ibv_qp *qp, uint64_t wr_id, int opcode, uint64_t laddr, uint32_t len,
                  uint32_t lkey, uint64_t raddr, uint32_t rkey, int flags,
                  struct ibv_cq *cq, ftv_wc *out, int *got);
int ftv_post_atomic(struct ibv_qp *qp, uint64_t wr_id, int opcode, uint64_t laddr, uint32_t lkey,
                    uint64_t raddr, uint32_t rkey, uint64_t compare_add, uint64_t swap, int flags,
                    struct ibv_cq *cq, ftv_wc *out, int *got);
int ftv_post_send(struct ibv_qp *qp, uint64_t wr_id, uint64_t laddr, uint32_t len, uint32_t lkey, int flags);
int ftv_post_recv(struct ibv_qp *qp, uint64_t wr_id, uint64_t laddr, uint32_t len, uint32_t lkey);

// Memory the device reaches: page-aligned, zeroed, outside the Go heap.
void *ftv_alloc(size_t len);
void ftv_free(void *p, size_t len);

#endif
