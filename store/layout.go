package store

import (
	"encoding/binary"
	"hash/crc32"
)

// The memory every rank exposes, in 8-byte words. All of it lives in one
// dynamic window: the table region (header, key slots, chunk table) is
// attached at Open and its address exchanged; heap chunks are attached later
// and published in the chunk table.
//
//	header  hdrWords words
//	slots   Slots × slotWords words
//	chunks  Chunks × chunkWords words
//	seen    seenWords(ranks) words: a bit per rank this rank knows failed
const (
	hdrWords   = 8
	hdrMagic   = 0                  // magic, so a reader can tell a table from garbage
	hdrWant    = 1                  // bytes a writer asks the owner to attach (0: nothing asked)
	hdrNoRoom  = 2                  // bytes the owner last failed to attach (0: its last attach worked)
	hdrClaim   = 3                  // the rank claiming a key slot here, plus one (0: none): claims are one at a time
	hdrAsk     = 4                  // counts requests to end leases this rank holds (see askLeases)
	hdrFloor   = 5                  // the highest version a deletion left here (see nextVersion)
	tableMagic = 0x6674726d612d6b76 // "ftrma-kv"

	// A key slot. Its key is the full key, kept in an immutable key block
	// at the slot's rank (see keyBlock) whose address is the key word: a
	// writer claims an empty slot (0) or a tombstone (slotTomb: the slot of
	// a deleted key) by compare-and-swapping the block's address into it,
	// under the rank's claim lock (hdrClaim), so that a key never gets two
	// slots at a rank. A deletion turns the slot into a tombstone at every
	// replica, under the key's locks, and counts up its generation, so that
	// a rank that kept the slot's place (key word and generation) for the
	// key sees that it is another key's now. The hash word holds the key's
	// keyed hash, written after the claim, as a filter for probes (0 while
	// the claim is under way, or in a tombstone: the key block decides). The lock word holds the version of the slot's last
	// completed write in its high bits and the rank holding the lock, plus
	// one, in its low bits (0: free). The current descriptor says where the
	// value's record is; the pending descriptor holds a transaction's value
	// until the transaction is decided.
	slotWords   = 12
	slotHash    = 0
	slotLock    = 1
	slotCurAddr = 2 // 0: no value (never written, or deleted)
	slotCurVer  = 3
	slotCurLen  = 4
	slotPAddr   = 5 // pending record, 0: none
	slotPVer    = 6
	slotPLen    = 7
	slotWant    = 8  // a rank that waits for the lock, plus one: asks a lease to end
	slotKey     = 9  // address of the slot's key block; 0: never used; slotTomb: free again
	slotGen     = 10 // counts the slot's tombstones
	slotDone    = 11 // a version every live replica held when written (see fastread.go)
	slotBytes   = slotWords * 8
	slotTomb    = 1 // the key word of a tombstone (never a block's address)

	// A chunk table entry: a piece of heap memory attached by the owner and
	// handed to one writer, who allocates in it without asking anyone.
	chunkWords = 4
	chunkOwner = 0 // writer rank + 1 (| sealed); 0: free; chunkNotReady while unused
	chunkAddr  = 1
	chunkSize  = 2
	chunkLive  = 3 // bytes of live blocks in the chunk
	chunkBytes = chunkWords * 8

	chunkNotReady = 1 << 63

	// Lock word: version << ownerBits | (owner rank + 1).
	ownerBits = 24
	ownerMask = 1<<ownerBits - 1
	// MaxVersion is the largest version a key can reach.
	maxVersion = 1<<(64-ownerBits) - 1
)

func lockWord(version uint64, owner int) uint64 {
	return version<<ownerBits | uint64(owner+1)
}

// lockOwner is the rank holding the lock, or -1.
func lockOwner(w uint64) int { return int(w&ownerMask) - 1 }

func lockVersion(w uint64) uint64 { return w >> ownerBits }

// A record, as stored in a heap block:
//
//	hash     8  the key's keyed hash
//	version  8
//	tx       8  the writer's transaction number and rank (0: a plain put)
//	klen     4
//	vlen     4
//	crc      4  CRC-32C of everything else in the record
//	flags    4  recDeleted: the record of a deletion (a transaction's)
//	key, value, zero padding to 8 bytes
const recHeader = 40

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// record is a decoded record.
type record struct {
	hash    uint64
	version uint64
	tx      uint64
	key     []byte
	value   []byte
	deleted bool // a transaction's deletion of the key, pending
}

const recDeleted = 1

// is reports whether r is a record of key id.
func (r record) is(id ident) bool { return r.hash == id.h && string(r.key) == id.key }

func recordLen(klen, vlen int) int { return (recHeader + klen + vlen + 7) &^ 7 }

// encodeRecord writes r into b, which is recordLen bytes long.
func encodeRecord(b []byte, r record) {
	le := binary.LittleEndian
	le.PutUint64(b[0:], r.hash)
	le.PutUint64(b[8:], r.version)
	le.PutUint64(b[16:], r.tx)
	le.PutUint32(b[24:], uint32(len(r.key)))
	le.PutUint32(b[28:], uint32(len(r.value)))
	le.PutUint32(b[32:], 0)
	var flags uint32
	if r.deleted {
		flags |= recDeleted
	}
	le.PutUint32(b[36:], flags)
	n := copy(b[recHeader:], r.key)
	n += copyYielding(b[recHeader+n:], r.value)
	clear(b[recHeader+n:])
	le.PutUint32(b[32:], recordCRC(b))
}

func recordCRC(b []byte) uint32 {
	c := crc32.Update(0, castagnoli, b[:32])
	return crcYielding(c, b[36:])
}

// decodeRecord checks and decodes a record read from a heap block; ok is false
// when b does not hold a whole, untorn record (it may have been overwritten,
// or read while being written). The returned slices alias b.
func decodeRecord(b []byte) (r record, ok bool) {
	if len(b) < recHeader {
		return r, false
	}
	le := binary.LittleEndian
	klen, vlen := int(le.Uint32(b[24:])), int(le.Uint32(b[28:]))
	if klen < 0 || vlen < 0 || recordLen(klen, vlen) != len(b) {
		return r, false
	}
	if le.Uint32(b[32:]) != recordCRC(b) {
		return r, false
	}
	r.hash = le.Uint64(b[0:])
	r.version = le.Uint64(b[8:])
	r.tx = le.Uint64(b[16:])
	r.key = b[recHeader : recHeader+klen]
	r.value = b[recHeader+klen : recHeader+klen+vlen]
	r.deleted = le.Uint32(b[36:])&recDeleted != 0
	return r, true
}

// A key block, the identity of a key slot, written once by the writer that
// claims the slot and never changed while the slot names it:
//
//	hash     8  the key's keyed hash
//	klen     8
//	key, zero padding to 8 bytes
//
// A prober that meets a slot whose hash is its key's (or not yet written)
// reads keyBlockLen(len(its key)) bytes at the block's address: the slot is
// its key's exactly when the block holds its hash, length and bytes. A block
// of a longer key holds another length; a shorter one may end before the
// read does (out of bounds: not its key either).
const keyHeader = 16

func keyBlockLen(klen int) int { return (keyHeader + klen + 7) &^ 7 }

func encodeKeyBlock(h uint64, key string) []byte {
	b := make([]byte, keyBlockLen(len(key)))
	putWords(b, h, uint64(len(key)))
	copy(b[keyHeader:], key)
	return b
}

// isKeyBlock reports whether b, read at a slot's key address, names id.
func isKeyBlock(b []byte, id ident) bool {
	return len(b) == keyBlockLen(len(id.key)) && word(b, 0) == id.h &&
		word(b, 1) == uint64(len(id.key)) && string(b[keyHeader:keyHeader+len(id.key)]) == id.key
}

// mix64 is the splitmix64 finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

func putWords(b []byte, ws ...uint64) {
	for i, w := range ws {
		binary.LittleEndian.PutUint64(b[8*i:], w)
	}
}

func word(b []byte, i int) uint64 { return binary.LittleEndian.Uint64(b[8*i:]) }
