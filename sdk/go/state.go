package policy

import (
	"encoding/binary"
	"math"
	"strconv"
)

// Snapshots in the Rust SDK's compact layout (sdk/src/state.rs): a 4-byte tag, a u16 format
// version, then little-endian fields.

// Writer builds a snapshot.
type Writer struct{ bytes []byte }

// NewWriter starts a snapshot with its tag (4 bytes) and format version.
func NewWriter(magic string, version uint16) *Writer {
	if len(magic) != 4 {
		panic("a snapshot tag is 4 bytes")
	}
	w := &Writer{bytes: append(make([]byte, 0, 64), magic...)}
	return w.U16(version)
}

func (w *Writer) U8(v uint8) *Writer { w.bytes = append(w.bytes, v); return w }
func (w *Writer) U16(v uint16) *Writer {
	w.bytes = binary.LittleEndian.AppendUint16(w.bytes, v)
	return w
}
func (w *Writer) U32(v uint32) *Writer {
	w.bytes = binary.LittleEndian.AppendUint32(w.bytes, v)
	return w
}
func (w *Writer) U64(v uint64) *Writer {
	w.bytes = binary.LittleEndian.AppendUint64(w.bytes, v)
	return w
}
func (w *Writer) F32(v float32) *Writer {
	return w.U32(math.Float32bits(v))
}
func (w *Writer) Bool(v bool) *Writer {
	if v {
		return w.U8(1)
	}
	return w.U8(0)
}

// Raw appends bytes as they are.
func (w *Writer) Raw(b []byte) *Writer { w.bytes = append(w.bytes, b...); return w }

// Bytes is the snapshot.
func (w *Writer) Bytes() []byte { return w.bytes }

// Reader reads a snapshot. The first failure is kept (reads after it return 0) and reported by
// Err and Finish, so a restore reads every field and checks once.
type Reader struct {
	state []byte
	err   error
}

// OpenReader checks the tag; the reader past the header and the format version found.
func OpenReader(state []byte, magic string) (*Reader, uint16, error) {
	if len(state) < 6 || string(state[:4]) != magic {
		return nil, 0, Refusal("snapshot is not from this policy (expected tag " + strconv.Quote(magic) + ")")
	}
	r := &Reader{state: state[4:]}
	return r, r.U16(), nil
}

func (r *Reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if len(r.state) < n {
		r.err = Refusal("snapshot is truncated")
		return nil
	}
	b := r.state[:n]
	r.state = r.state[n:]
	return b
}

func (r *Reader) U8() uint8 {
	if b := r.take(1); b != nil {
		return b[0]
	}
	return 0
}
func (r *Reader) U16() uint16 {
	if b := r.take(2); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}
func (r *Reader) U32() uint32 {
	if b := r.take(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}
func (r *Reader) U64() uint64 {
	if b := r.take(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}
func (r *Reader) F32() float32 { return math.Float32frombits(r.U32()) }
func (r *Reader) Bool() bool   { return r.U8() != 0 }

// Err is the first failure so far, or nil.
func (r *Reader) Err() error { return r.err }

// Finish is nil when every byte was read without error: trailing bytes mean a format mismatch.
func (r *Reader) Finish() error {
	if r.err != nil {
		return r.err
	}
	if len(r.state) > 0 {
		return Refusal("snapshot has " + strconv.Itoa(len(r.state)) + " unexpected trailing bytes")
	}
	return nil
}
