package tinymodel

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
)

// The GGUF container, version 3, as ggml/include/gguf.h describes it at
// llama.cpp 80fb11a: magic, version, tensor count, key-value count, the
// key-values, the tensor infos, then the tensor data, each tensor aligned to
// general.alignment (32 by default). Little-endian throughout.

const (
	ggufMagic     = "GGUF"
	ggufVersion   = 3
	ggufAlignment = 32
)

// ValueType is a GGUF metadata value type (gguf.h enum gguf_type).
type ValueType uint32

// The GGUF value types.
const (
	TypeUint8 ValueType = iota
	TypeInt8
	TypeUint16
	TypeInt16
	TypeUint32
	TypeInt32
	TypeFloat32
	TypeBool
	TypeString
	TypeArray
	TypeUint64
	TypeInt64
	TypeFloat64
)

// Value is one metadata value. V holds uint8, int8, uint16, int16, uint32,
// int32, float32, bool, string, uint64, int64 or float64, or for TypeArray
// a []any of Elem-typed values (arrays of arrays are not used by llama.cpp's
// tokenizers and are refused).
type Value struct {
	Type ValueType
	Elem ValueType // for TypeArray
	V    any
}

// KV is one metadata key-value pair.
type KV struct {
	Key   string
	Value Value
}

// TensorType is a ggml tensor type (ggml.h enum ggml_type); only the ones
// this package writes.
type TensorType uint32

// Tensor types the writer supports.
const (
	F32  TensorType = 0
	Q8_0 TensorType = 8
)

func (t TensorType) String() string {
	switch t {
	case F32:
		return "f32"
	case Q8_0:
		return "q8_0"
	}
	return fmt.Sprintf("type%d", uint32(t))
}

// qk8 is Q8_0's block length (ggml-common.h QK8_0); a block is an f16 scale
// and 32 int8 values.
const qk8 = 32

// size is the bytes n elements of t take.
func (t TensorType) size(n uint64) uint64 {
	if t == Q8_0 {
		return n / qk8 * (2 + qk8)
	}
	return n * 4
}

// Tensor is one tensor to write: its name, its shape (ne[0] first: the row
// length) and a function that yields its rows in order.
type Tensor struct {
	Name string
	Dims []uint64
	Type TensorType
	// Row fills dst (len Dims[0]) with row i.
	Row func(i uint64, dst []float32)
}

func (t Tensor) elems() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Encode writes a GGUF file: the metadata in order, then the tensors.
func Encode(w io.Writer, kvs []KV, tensors []Tensor) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	e := &encoder{w: bw}
	e.raw([]byte(ggufMagic))
	e.u32(ggufVersion)
	e.u64(uint64(len(tensors)))
	e.u64(uint64(len(kvs)))
	for _, kv := range kvs {
		e.str(kv.Key)
		e.value(kv.Value)
	}
	var off uint64
	for _, t := range tensors {
		if t.Type == Q8_0 && t.Dims[0]%qk8 != 0 {
			return fmt.Errorf("tensor %s: q8_0 needs a row length that is a multiple of %d, not %d", t.Name, qk8, t.Dims[0])
		}
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(off)
		off = align(off + t.Type.size(t.elems()))
	}
	e.pad()
	for _, t := range tensors {
		row := make([]float32, t.Dims[0])
		rows := t.elems() / t.Dims[0]
		for i := range rows {
			clear(row)
			t.Row(i, row)
			if t.Type == Q8_0 {
				e.q8(row)
			} else {
				for _, x := range row {
					e.u32(math.Float32bits(x))
				}
			}
		}
		e.pad()
	}
	if e.err != nil {
		return e.err
	}
	return bw.Flush()
}

func align(n uint64) uint64 { return (n + ggufAlignment - 1) / ggufAlignment * ggufAlignment }

type encoder struct {
	w   *bufio.Writer
	n   uint64
	err error
	buf [8]byte
}

func (e *encoder) raw(b []byte) {
	if e.err != nil {
		return
	}
	n, err := e.w.Write(b)
	e.n += uint64(n)
	e.err = err
}

func (e *encoder) u8(v uint8) { e.raw([]byte{v}) }
func (e *encoder) u16(v uint16) {
	binary.LittleEndian.PutUint16(e.buf[:2], v)
	e.raw(e.buf[:2])
}
func (e *encoder) u32(v uint32) {
	binary.LittleEndian.PutUint32(e.buf[:4], v)
	e.raw(e.buf[:4])
}
func (e *encoder) u64(v uint64) {
	binary.LittleEndian.PutUint64(e.buf[:8], v)
	e.raw(e.buf[:8])
}
func (e *encoder) str(s string) {
	e.u64(uint64(len(s)))
	e.raw([]byte(s))
}

func (e *encoder) pad() {
	for e.n%ggufAlignment != 0 {
		e.u8(0)
	}
}

func (e *encoder) value(v Value) {
	e.u32(uint32(v.Type))
	if v.Type == TypeArray {
		xs, _ := v.V.([]any)
		e.u32(uint32(v.Elem))
		e.u64(uint64(len(xs)))
		for _, x := range xs {
			e.scalar(v.Elem, x)
		}
		return
	}
	e.scalar(v.Type, v.V)
}

func (e *encoder) scalar(t ValueType, x any) {
	switch t {
	case TypeUint8:
		e.u8(x.(uint8))
	case TypeInt8:
		e.u8(uint8(x.(int8)))
	case TypeUint16:
		e.u16(x.(uint16))
	case TypeInt16:
		e.u16(uint16(x.(int16)))
	case TypeUint32:
		e.u32(x.(uint32))
	case TypeInt32:
		e.u32(uint32(x.(int32)))
	case TypeFloat32:
		e.u32(math.Float32bits(x.(float32)))
	case TypeBool:
		b := uint8(0)
		if x.(bool) {
			b = 1
		}
		e.u8(b)
	case TypeString:
		e.str(x.(string))
	case TypeUint64:
		e.u64(x.(uint64))
	case TypeInt64:
		e.u64(uint64(x.(int64)))
	case TypeFloat64:
		e.u64(math.Float64bits(x.(float64)))
	default:
		if e.err == nil {
			e.err = fmt.Errorf("gguf: cannot write a value of type %d", t)
		}
	}
}

// q8 writes one row as Q8_0 blocks: scale amax/127 as f16, then
// round(x/scale) as int8 (ggml-quants.c quantize_row_q8_0_ref).
func (e *encoder) q8(row []float32) {
	var qs [qk8]byte
	for b := 0; b < len(row); b += qk8 {
		blk := row[b : b+qk8]
		var amax float32
		for _, x := range blk {
			amax = max(amax, float32(math.Abs(float64(x))))
		}
		d := amax / 127
		id := float32(0)
		if d != 0 {
			id = 1 / d
		}
		for j, x := range blk {
			qs[j] = byte(int8(math.Round(float64(x * id))))
		}
		e.u16(f32ToF16(d))
		e.raw(qs[:])
	}
}

// f32ToF16 converts to IEEE half precision, rounding to nearest even;
// values beyond the range become infinity (never the case for Q8_0 scales
// of the small weights this package writes).
func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23&0xff) - 127 + 15
	mant := b & 0x7fffff
	switch {
	case exp >= 31:
		return sign | 0x7c00
	case exp <= 0:
		if exp < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint32(14 - exp)
		half := uint32(1) << (shift - 1)
		r := mant >> shift
		if rem := mant & (1<<shift - 1); rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(exp)<<10 | mant>>13
	if rem := mant & 0x1fff; rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // may carry into the exponent, which is the right answer
	}
	return sign | uint16(r)
}

// File is what ReadFile found: the metadata in file order and the tensor
// infos.
type File struct {
	KVs     []KV
	Tensors []TensorInfo
}

// TensorInfo is one tensor's header.
type TensorInfo struct {
	Name   string
	Dims   []uint64
	Type   TensorType
	Offset uint64
}

// Get returns the value of key.
func (f *File) Get(key string) (Value, bool) {
	for _, kv := range f.KVs {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return Value{}, false
}

// ReadFile reads a GGUF file's metadata and tensor infos (not the data).
func ReadFile(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close() //nolint:errcheck // read only
	f, err := Read(bufio.NewReaderSize(fh, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// maxCount bounds counts read from a file, so that a corrupt header fails
// instead of allocating without end.
const maxCount = 1 << 24

// Read reads GGUF metadata and tensor infos from r.
func Read(r io.Reader) (*File, error) {
	d := &decoder{r: r}
	magic := make([]byte, 4)
	d.full(magic)
	if d.err == nil && string(magic) != ggufMagic {
		return nil, fmt.Errorf("not a GGUF file (magic %q)", magic)
	}
	if v := d.u32(); d.err == nil && v != ggufVersion {
		return nil, fmt.Errorf("GGUF version %d, want %d", v, ggufVersion)
	}
	nt, nkv := d.u64(), d.u64()
	if d.err == nil && (nt > maxCount || nkv > maxCount) {
		return nil, fmt.Errorf("implausible counts: %d tensors, %d key-values", nt, nkv)
	}
	f := &File{}
	for i := uint64(0); i < nkv && d.err == nil; i++ {
		k := d.str()
		f.KVs = append(f.KVs, KV{Key: k, Value: d.value()})
	}
	for i := uint64(0); i < nt && d.err == nil; i++ {
		ti := TensorInfo{Name: d.str()}
		n := d.u32()
		if n > 4 {
			return nil, fmt.Errorf("tensor %s: %d dimensions", ti.Name, n)
		}
		for range n {
			ti.Dims = append(ti.Dims, d.u64())
		}
		ti.Type = TensorType(d.u32())
		ti.Offset = d.u64()
		f.Tensors = append(f.Tensors, ti)
	}
	if d.err != nil {
		if errors.Is(d.err, io.EOF) || errors.Is(d.err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("truncated GGUF header: %w", io.ErrUnexpectedEOF)
		}
		return nil, d.err
	}
	return f, nil
}

type decoder struct {
	r   io.Reader
	err error
	buf [8]byte
}

func (d *decoder) full(b []byte) {
	if d.err != nil {
		return
	}
	_, d.err = io.ReadFull(d.r, b)
}

func (d *decoder) u8() uint8 { d.full(d.buf[:1]); return d.buf[0] }
func (d *decoder) u16() uint16 {
	d.full(d.buf[:2])
	return binary.LittleEndian.Uint16(d.buf[:2])
}
func (d *decoder) u32() uint32 {
	d.full(d.buf[:4])
	return binary.LittleEndian.Uint32(d.buf[:4])
}
func (d *decoder) u64() uint64 {
	d.full(d.buf[:8])
	return binary.LittleEndian.Uint64(d.buf[:8])
}

func (d *decoder) str() string {
	n := d.u64()
	if d.err != nil {
		return ""
	}
	if n > maxCount {
		d.err = fmt.Errorf("implausible string length %d", n)
		return ""
	}
	b := make([]byte, n)
	d.full(b)
	return string(b)
}

func (d *decoder) value() Value {
	t := ValueType(d.u32())
	if t != TypeArray {
		return Value{Type: t, V: d.scalar(t)}
	}
	elem := ValueType(d.u32())
	n := d.u64()
	if d.err == nil && (n > maxCount || elem == TypeArray) {
		d.err = fmt.Errorf("unsupported array: %d elements of type %d", n, elem)
	}
	var xs []any
	for i := uint64(0); i < n && d.err == nil; i++ {
		xs = append(xs, d.scalar(elem))
	}
	return Value{Type: TypeArray, Elem: elem, V: xs}
}

func (d *decoder) scalar(t ValueType) any {
	switch t {
	case TypeUint8:
		return d.u8()
	case TypeInt8:
		return int8(d.u8())
	case TypeUint16:
		return d.u16()
	case TypeInt16:
		return int16(d.u16())
	case TypeUint32:
		return d.u32()
	case TypeInt32:
		return int32(d.u32())
	case TypeFloat32:
		return math.Float32frombits(d.u32())
	case TypeBool:
		return d.u8() != 0
	case TypeString:
		return d.str()
	case TypeUint64:
		return d.u64()
	case TypeInt64:
		return int64(d.u64())
	case TypeFloat64:
		return math.Float64frombits(d.u64())
	}
	if d.err == nil {
		d.err = fmt.Errorf("unknown GGUF value type %d", t)
	}
	return nil
}
