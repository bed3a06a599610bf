package tcp

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// Sealed connections (see "Security" in the package documentation). Each
// direction of a connection is a stream of records:
//
//	record: length u32 (of what follows) | AES-128-GCM(plaintext) with its 16-byte tag
//
// The plaintext is the frames this side writes, cut into pieces of at most
// maxRecord bytes; the record's length field is its additional data. The
// nonce is not sent: it is the record's number in its direction (4 zero
// bytes, then the count as a big-endian u64), so a record dropped, repeated
// or moved fails to open, and the connection goes down. Each direction has
// its own key, derived by HKDF-SHA256 from the connection's secret (the
// job secret, or the pair key of the two hosts: hostkey.go), both
// handshake nonces and both ranks (dataKeys): fresh per connection, bound
// to the pair. After rekeyEvery records a direction's key is replaced by
// HKDF-Expand(key, "ftrma tcp rekey"), at both ends at the same record,
// well inside AES-GCM's limit for 2^14-byte records (RFC 8446 §5.5: 2^24.5
// records per key).

const (
	sealTag   = 16
	maxRecord = 16 << 10
	keyLen    = 16
)

// rekeyEvery is the records sealed under one key (a variable for tests).
var rekeyEvery uint64 = 1 << 24

// errSealBroken is the error of a connection whose record did not open.
var errSealBroken = errors.New("tcp: a sealed record failed authentication (altered, replayed, reordered or cut)")

// dataKeys derives the keys of a sealed connection from rank from (the
// dialer) to rank to: the dialer's sending key and the acceptor's.
func dataKeys(secret []byte, from, to uint32, nonceD, nonceA []byte) (dialer, acceptor []byte, err error) {
	salt := append(append([]byte(nil), nonceD...), nonceA...)
	k, err := hkdf.Key(sha256.New, secret, salt, fmt.Sprintf("ftrma tcp data v1 %d>%d", from, to), 2*keyLen)
	if err != nil {
		return nil, nil, err
	}
	return k[:keyLen], k[keyLen:], nil
}

// recordKey is one direction's key and record count.
type recordKey struct {
	key   []byte
	aead  cipher.AEAD
	n     uint64 // records so far in this direction (the next nonce)
	left  uint64 // records left under key
	nonce [12]byte
}

func newRecordKey(key []byte) (*recordKey, error) {
	k := &recordKey{}
	return k, k.set(key)
}

func (k *recordKey) set(key []byte) error {
	b, err := aes.NewCipher(key)
	if err != nil {
		return err
	}
	if k.aead, err = cipher.NewGCM(b); err != nil {
		return err
	}
	k.key, k.left = key, rekeyEvery
	return nil
}

// next returns the nonce of the next record and counts it, moving to the
// next key when the current one is used up.
func (k *recordKey) next() ([]byte, error) {
	if k.left == 0 {
		key, err := hkdf.Expand(sha256.New, k.key, "ftrma tcp rekey", keyLen)
		if err != nil {
			return nil, err
		}
		if err := k.set(key); err != nil {
			return nil, err
		}
	}
	k.left--
	binary.BigEndian.PutUint64(k.nonce[4:], k.n)
	k.n++
	return k.nonce[:], nil
}

// sealer seals what one side writes; only the goroutine that owns the
// connection's write side uses it, so records go out in the order of
// their numbers.
type sealer struct{ k *recordKey }

// sealedLen is the length of the records of n bytes.
func sealedLen(n int) int { return n + (n+maxRecord-1)/maxRecord*(4+sealTag) }

// seal appends to dst the records of p.
func (s *sealer) seal(dst, p []byte) []byte {
	n := sealedLen(len(p))
	if cap(dst)-len(dst) < n {
		dst = append(make([]byte, 0, len(dst)+n), dst...)
	}
	for len(p) > 0 {
		m := min(len(p), maxRecord)
		nonce, err := s.k.next()
		if err != nil { // HKDF-Expand of 16 bytes cannot fail
			panic(err)
		}
		at := len(dst)
		dst = binary.BigEndian.AppendUint32(dst, uint32(m+sealTag))
		dst = s.k.aead.Seal(dst, nonce, p[:m], dst[at:at+4])
		p = p[m:]
	}
	return dst
}

// opener opens what the peer writes; only the holder of the connection's
// read token uses it.
type opener struct {
	k        *recordKey
	in       []byte // received records: in[off:end] not yet opened
	off, end int
	out      []byte // opened plaintext not yet taken: out[oOff:]
	oOff     int
}

func newOpener(k *recordKey) *opener {
	return &opener{k: k, in: make([]byte, 256<<10), out: make([]byte, 0, maxRecord)}
}

// buffered reports whether received bytes wait to be opened or taken.
func (o *opener) buffered() bool { return o.end > o.off || o.oOff < len(o.out) }

// whole reports whether the opener holds plaintext not taken or a whole
// record: what the socket will raise no readiness event for, since it
// already took the bytes. (A partial record's rest is still to come.)
func (o *opener) whole() bool {
	if o.oOff < len(o.out) {
		return true
	}
	if o.end-o.off < 4 {
		return false
	}
	return o.end-o.off >= 4+int(binary.BigEndian.Uint32(o.in[o.off:]))
}

// read fills b with plaintext without blocking: what is opened and not
// taken, else the next record, which it reads with raw (the socket's
// non-blocking read: (0, nil) when it has nothing) until one is whole. A
// record that fits in b is opened straight into it. (0, nil) means no
// whole record has come yet.
func (o *opener) read(b []byte, raw func([]byte) (int, error)) (int, error) {
	if o.oOff < len(o.out) {
		n := copy(b, o.out[o.oOff:])
		o.oOff += n
		return n, nil
	}
	for {
		if o.end-o.off >= 4 {
			l := int(binary.BigEndian.Uint32(o.in[o.off:]))
			if l < sealTag || l > maxRecord+sealTag {
				return 0, fmt.Errorf("%w: a record of %d bytes", errSealBroken, l)
			}
			if o.end-o.off >= 4+l {
				rec := o.in[o.off : o.off+4+l]
				nonce, err := o.k.next()
				if err != nil {
					return 0, err
				}
				dst := o.out[:0]
				direct := len(b) >= l-sealTag
				if direct {
					dst = b[:0]
				}
				pt, err := o.k.aead.Open(dst, nonce, rec[4:], rec[:4])
				if err != nil {
					return 0, errSealBroken
				}
				o.off += 4 + l
				if direct {
					return len(pt), nil
				}
				o.out, o.oOff = pt, copy(b, pt)
				return o.oOff, nil
			}
			if need := 4 + l; o.off+need > len(o.in) {
				o.compact(need)
			}
		} else if o.off+4 > len(o.in) {
			o.compact(4)
		}
		n, err := raw(o.in[o.end:])
		if n <= 0 {
			return 0, err
		}
		o.end += n
	}
}

// compact moves the unopened bytes to the front of in, growing it to hold
// need bytes from there.
func (o *opener) compact(need int) {
	if need > len(o.in) {
		in := make([]byte, need)
		o.end = copy(in, o.in[o.off:o.end])
		o.in, o.off = in, 0
		return
	}
	o.end = copy(o.in, o.in[o.off:o.end])
	o.off = 0
}
