// Package runtime is the memory side of the canonical ABI for wit-bindgen's Go bindings: memory
// the host writes arguments into (cabi_realloc) and memory results are written into (Allocate),
// both kept alive by pinning until the export that uses them is done. Written for agentrt
// (sdk/go/witpkg/go.mod says why).
package runtime

import (
	"runtime"
	"unsafe"
)

// argumentPinner holds what cabi_realloc handed the host for the current call's arguments; the
// bindings call Unpin once they have copied or wrapped them.
var argumentPinner runtime.Pinner

// Allocate returns size bytes aligned to align (at most 8, all the contract needs), pinned by
// pinner so the garbage collector neither moves nor frees them while the host reads them.
func Allocate(pinner *runtime.Pinner, size, align uintptr) unsafe.Pointer {
	if align > 8 {
		panic("wit runtime: alignment above 8")
	}
	words := make([]uint64, (size+7)/8+1) // never empty: a zero-length result still has an address
	p := unsafe.Pointer(unsafe.SliceData(words))
	pinner.Pin(p)
	return p
}

// Unpin releases the memory cabi_realloc gave the host for the current call's arguments.
func Unpin() {
	argumentPinner.Unpin()
}

// cabiRealloc is the canonical ABI's allocator: where the host copies lists and strings it
// passes in.
//
//go:wasmexport cabi_realloc
func cabiRealloc(old unsafe.Pointer, oldSize, align, newSize uintptr) unsafe.Pointer {
	p := Allocate(&argumentPinner, newSize, align)
	if old != nil && oldSize > 0 {
		n := oldSize
		if newSize < n {
			n = newSize
		}
		copy(unsafe.Slice((*byte)(p), n), unsafe.Slice((*byte)(old), n))
	}
	return p
}
