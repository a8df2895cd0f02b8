// Package types holds the generic shapes wit-bindgen's Go bindings use for WIT's option, result,
// tuple and unit types. Written for agentrt (sdk/go/witpkg/go.mod says why).
package types

// Unit is WIT's empty payload (the `_` in `result<_, string>`).
type Unit struct{}

// Option is WIT's `option<T>`.
type Option[T any] struct {
	value T
	some  bool
}

// None is an option without a value.
func None[T any]() Option[T] { return Option[T]{} }

// Some is an option holding value.
func Some[T any](value T) Option[T] { return Option[T]{value: value, some: true} }

// IsSome reports whether the option holds a value.
func (o Option[T]) IsSome() bool { return o.some }

// IsNone reports whether the option is empty.
func (o Option[T]) IsNone() bool { return !o.some }

// Get returns the value and whether there is one.
func (o Option[T]) Get() (T, bool) { return o.value, o.some }

// Some returns the value; it panics on an empty option.
func (o Option[T]) Some() T {
	if !o.some {
		panic("wit option: Some() on none")
	}
	return o.value
}

// Result tags.
const (
	ResultOk  uint8 = 0
	ResultErr uint8 = 1
)

// Result is WIT's `result<T, E>`.
type Result[T any, E any] struct {
	tag uint8
	ok  T
	err E
}

// Ok is a successful result.
func Ok[T any, E any](value T) Result[T, E] { return Result[T, E]{tag: ResultOk, ok: value} }

// Err is a failed result.
func Err[T any, E any](err E) Result[T, E] { return Result[T, E]{tag: ResultErr, err: err} }

// Tag is ResultOk or ResultErr.
func (r Result[T, E]) Tag() uint8 { return r.tag }

// IsOk reports whether the result succeeded.
func (r Result[T, E]) IsOk() bool { return r.tag == ResultOk }

// IsErr reports whether the result failed.
func (r Result[T, E]) IsErr() bool { return r.tag == ResultErr }

// Ok returns the success value; it panics on an error.
func (r Result[T, E]) Ok() T {
	if r.tag != ResultOk {
		panic("wit result: Ok() on an error")
	}
	return r.ok
}

// Err returns the error value; it panics on a success.
func (r Result[T, E]) Err() E {
	if r.tag != ResultErr {
		panic("wit result: Err() on a success")
	}
	return r.err
}

// Tuple2 is WIT's `tuple<A, B>`.
type Tuple2[A any, B any] struct {
	F0 A
	F1 B
}
