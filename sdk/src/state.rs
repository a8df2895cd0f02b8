//! A compact little-endian encoding for snapshots, with a magic tag and a format version so that
//! `restore` can refuse (with a clear message) state written by another policy or a future format.
//! Guests avoid serde to stay small; this is all a snapshot needs.

/// Writes a snapshot.
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// Start a snapshot tagged with a 4-byte `magic` (the policy's) and a format `version`.
    pub fn new(magic: [u8; 4], version: u16) -> Self {
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(&magic);
        buf.extend_from_slice(&version.to_le_bytes());
        Self { buf }
    }
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn f32(&mut self, v: f32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Bytes written so far: lets a policy keep its snapshot inside a budget.
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

/// Reads a snapshot written by [`Writer`]. Every read fails with a message instead of panicking.
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Check the tag and return the reader and the format version found.
    pub fn new(state: &'a [u8], magic: [u8; 4]) -> Result<(Self, u16), String> {
        if state.len() < 6 || state[..4] != magic {
            return Err(format!(
                "snapshot is not from this policy (expected tag {:?})",
                String::from_utf8_lossy(&magic)
            ));
        }
        let version = u16::from_le_bytes([state[4], state[5]]);
        Ok((Self { rest: &state[6..] }, version))
    }

    /// [`Reader::new`] for a policy that reads exactly one format: anything else is refused,
    /// naming the policy (`what`), the format found and the one it reads.
    pub fn of_format(state: &'a [u8], magic: [u8; 4], format: u16, what: &str) -> Result<Self, String> {
        let (reader, version) = Self::new(state, magic)?;
        if version != format {
            return Err(format!(
                "unknown {what} snapshot format {version} (this version reads {format})"
            ));
        }
        Ok(reader)
    }
    fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
        if self.rest.len() < N {
            return Err("snapshot is truncated".to_string());
        }
        let (head, tail) = self.rest.split_at(N);
        self.rest = tail;
        Ok(head.try_into().expect("split_at gave N bytes"))
    }
    pub fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take::<1>()?[0])
    }
    pub fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.take()?))
    }
    pub fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take()?))
    }
    pub fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take()?))
    }
    pub fn f32(&mut self) -> Result<f32, String> {
        Ok(f32::from_le_bytes(self.take()?))
    }
    /// Fail unless every byte was read: trailing bytes mean a format mismatch.
    pub fn finish(self) -> Result<(), String> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(format!("snapshot has {} unexpected trailing bytes", self.rest.len()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_damage_is_reported() {
        let mut w = Writer::new(*b"TEST", 2);
        w.u8(1).u16(2).u32(3).u64(4).f32(0.5);
        let bytes = w.finish();
        let (mut r, v) = Reader::new(&bytes, *b"TEST").unwrap();
        assert_eq!(v, 2);
        assert_eq!(
            (r.u8().unwrap(), r.u16().unwrap(), r.u32().unwrap(), r.u64().unwrap()),
            (1, 2, 3, 4)
        );
        assert_eq!(r.f32().unwrap(), 0.5);
        r.finish().unwrap();

        assert!(Reader::new(&bytes, *b"OTHR").is_err());
        // Header (6) + u8 (1) + u16 (2) + one byte of the u32.
        let (mut short, _) = Reader::new(&bytes[..10], *b"TEST").unwrap();
        assert_eq!((short.u8().unwrap(), short.u16().unwrap()), (1, 2));
        assert!(short.u32().unwrap_err().contains("truncated"));
    }

    #[test]
    fn of_format_refuses_another_format_naming_it() {
        let bytes = Writer::new(*b"TEST", 3).finish();
        Reader::of_format(&bytes, *b"TEST", 3, "test")
            .unwrap()
            .finish()
            .unwrap();
        let err = Reader::of_format(&bytes, *b"TEST", 2, "test").err().unwrap();
        assert_eq!(err, "unknown test snapshot format 3 (this version reads 2)");
        assert!(Reader::of_format(&bytes, *b"OTHR", 3, "test").is_err());
    }
}
