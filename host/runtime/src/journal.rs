//! What a slot's policy has observed since its last checkpoint, so that a restart loses nothing
//! that succeeded.
//!
//! A trapped wasmtime instance cannot be entered again, so any failure — including a failed
//! `snapshot` — costs the instance and whatever it learned since the last checkpoint. The journal
//! keeps the successful `observe`/`observe-blocks` inputs since that checkpoint; a restart
//! restores the checkpoint and replays them. It is bounded ([`JOURNAL_MAX_BYTES`]): past the bound
//! it is dropped and a restart resumes from the checkpoint alone, as it did before the journal.
//! A call that failed is never journaled, so replay does not repeat the failure that caused it.

use crate::types::Event;

/// Approximate bytes of inputs kept per slot. At the default checkpoint interval (1 s) this is
/// far more than a second of traffic; it matters when checkpoints fail and back off.
pub const JOURNAL_MAX_BYTES: usize = 4 << 20;

#[derive(Debug, Clone)]
pub(crate) enum Entry {
    Events(Vec<Event>),
    Blocks(Vec<u64>),
}

#[derive(Debug, Default)]
pub(crate) struct Journal {
    entries: Vec<Entry>,
    bytes: usize,
    /// Set when the bound was passed since the last checkpoint: replay would be incomplete, so
    /// nothing is replayed (and nothing more kept) until the next checkpoint.
    overflowed: bool,
}

impl Journal {
    pub(crate) fn record_events(&mut self, events: &[Event]) {
        let bytes = events.iter().map(event_bytes).sum();
        if self.make_room(bytes) {
            self.entries.push(Entry::Events(events.to_vec()));
        }
    }

    pub(crate) fn record_blocks(&mut self, packed: &[u64]) {
        if self.make_room(packed.len() * 8) {
            self.entries.push(Entry::Blocks(packed.to_vec()));
        }
    }

    fn make_room(&mut self, bytes: usize) -> bool {
        if self.overflowed {
            return false;
        }
        if self.bytes + bytes > JOURNAL_MAX_BYTES {
            self.entries = Vec::new();
            self.bytes = 0;
            self.overflowed = true;
            return false;
        }
        self.bytes += bytes;
        true
    }

    /// A checkpoint was taken (or replaced): it covers everything recorded so far.
    pub(crate) fn clear(&mut self) {
        *self = Self::default();
    }

    /// The inputs to replay on top of the checkpoint (none if the journal overflowed).
    pub(crate) fn entries(&self) -> &[Entry] {
        &self.entries
    }
}

/// Host-side size of an event, strings included (only agent registrations carry one).
fn event_bytes(event: &Event) -> usize {
    std::mem::size_of::<Event>()
        + match event {
            Event::AgentRegistered(a) => a.name.len(),
            _ => 0,
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_bound_nothing_is_replayed_until_the_next_checkpoint() {
        let mut j = Journal::default();
        j.record_blocks(&[1, 2, 3]);
        assert_eq!(j.entries().len(), 1);
        j.record_blocks(&vec![0; JOURNAL_MAX_BYTES / 8]);
        assert!(j.entries().is_empty(), "a partial replay would be a wrong state");
        j.record_blocks(&[4]);
        assert!(j.entries().is_empty());
        j.clear();
        j.record_blocks(&[4]);
        assert_eq!(j.entries().len(), 1);
    }
}
