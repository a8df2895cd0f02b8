// Snapshots in the Rust SDK's compact layout (sdk/src/state.rs): a 4-byte tag, a u16 format
// version, then little-endian fields. `StateReader` throws an Error naming what is wrong, which
// `restore` passes on to the host as its refusal. u64 fields are BigInt.

export class StateWriter {
  constructor(magic, version) {
    if (magic.length !== 4) throw new Error('a snapshot tag is 4 characters');
    this.bytes = [];
    for (const c of magic) this.bytes.push(c.charCodeAt(0));
    this.u16(version);
  }
  put(value, size) {
    let v = BigInt(value);
    for (let i = 0; i < size; i++) {
      this.bytes.push(Number(v & 0xffn));
      v >>= 8n;
    }
    return this;
  }
  u8(v) { return this.put(v, 1); }
  u16(v) { return this.put(v, 2); }
  u32(v) { return this.put(v, 4); }
  u64(v) { return this.put(v, 8); }
  f32(v) {
    const view = new DataView(new ArrayBuffer(4));
    view.setFloat32(0, v, true);
    for (let i = 0; i < 4; i++) this.bytes.push(view.getUint8(i));
    return this;
  }
  finish() { return Uint8Array.from(this.bytes); }
}

export class StateReader {
  /** The reader past the header and the format version found: `[reader, version]`. */
  static open(state, magic) {
    const tag = String.fromCharCode(...state.subarray(0, 4));
    if (state.length < 6 || tag !== magic) {
      throw new Error(`snapshot is not from this policy (expected tag ${JSON.stringify(magic)})`);
    }
    const reader = new StateReader(state, 4);
    const version = reader.u16();
    return [reader, version];
  }
  constructor(state, at) {
    this.state = state;
    this.at = at;
  }
  take(size) {
    if (this.at + size > this.state.length) throw new Error('snapshot is truncated');
    let v = 0n;
    for (let i = size - 1; i >= 0; i--) v = (v << 8n) | BigInt(this.state[this.at + i]);
    this.at += size;
    return size === 8 ? v : Number(v);
  }
  u8() { return this.take(1); }
  u16() { return this.take(2); }
  u32() { return this.take(4); }
  u64() { return this.take(8); }
  f32() {
    if (this.at + 4 > this.state.length) throw new Error('snapshot is truncated');
    const v = new DataView(this.state.buffer, this.state.byteOffset + this.at, 4).getFloat32(0, true);
    this.at += 4;
    return v;
  }
  /** Throw unless every byte was read: trailing bytes mean a format mismatch. */
  finish() {
    const left = this.state.length - this.at;
    if (left) throw new Error(`snapshot has ${left} unexpected trailing bytes`);
  }
}
