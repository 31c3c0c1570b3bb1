//! Frame buffers: one arena, allocated at start, of fixed-size buffers big enough for the
//! largest frame a port delivers (a 64 KiB GSO super-frame plus its virtio-net header).
//!
//! A buffer is named by its index, which is what travels through the scheduler as a packet's
//! token: frames are never copied between reading and writing. The number of buffers is the
//! daemon's global memory bound (`memory / buffer size`); when none is free the reader stops
//! reading until a frame leaves (see `datapath`).

/// Bytes per buffer: a 64 KiB frame and a 12-byte virtio-net header, rounded up.
pub const BUF_SIZE: usize = 65_536 + 64;

/// A pool of frame buffers.
pub struct Buffers {
    arena: Vec<u8>,
    lens: Vec<u32>,
    meta: Vec<Meta>,
    free: Vec<u32>,
}

/// What the datapath remembers about the frame in a buffer between reading and writing it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    /// When it was read, ns.
    pub arrived: u64,
    /// Offset of its IP header from the start of the buffer (0: not IP).
    pub l3: u16,
    /// Its ethertype after VLAN tags.
    pub ethertype: u16,
}

impl Buffers {
    /// `count` buffers of [`BUF_SIZE`] bytes.
    pub fn new(count: usize) -> Self {
        Buffers {
            arena: vec![0; count * BUF_SIZE],
            lens: vec![0; count],
            meta: vec![Meta::default(); count],
            free: (0..count as u32).rev().collect(),
        }
    }

    /// Buffers in the pool.
    pub fn count(&self) -> usize {
        self.lens.len()
    }

    /// Buffers free now.
    pub fn available(&self) -> usize {
        self.free.len()
    }

    /// Take a free buffer.
    pub fn take(&mut self) -> Option<u32> {
        self.free.pop()
    }

    /// Give buffer `idx` back.
    pub fn give(&mut self, idx: u32) {
        debug_assert!(!self.free.contains(&idx), "buffer {idx} given back twice");
        self.lens[idx as usize] = 0;
        self.meta[idx as usize] = Meta::default();
        self.free.push(idx);
    }

    /// The whole of buffer `idx`, to read a frame into.
    pub fn space(&mut self, idx: u32) -> &mut [u8] {
        let start = idx as usize * BUF_SIZE;
        &mut self.arena[start..start + BUF_SIZE]
    }

    /// Record that buffer `idx` holds `len` bytes.
    pub fn set_len(&mut self, idx: u32, len: usize) {
        self.lens[idx as usize] = len.min(BUF_SIZE) as u32;
    }

    /// The frame in buffer `idx`.
    pub fn frame(&self, idx: u32) -> &[u8] {
        let start = idx as usize * BUF_SIZE;
        &self.arena[start..start + self.lens[idx as usize] as usize]
    }

    /// The frame in buffer `idx`, to change in place.
    pub fn frame_mut(&mut self, idx: u32) -> &mut [u8] {
        let start = idx as usize * BUF_SIZE;
        &mut self.arena[start..start + self.lens[idx as usize] as usize]
    }

    /// What is known about the frame in buffer `idx`.
    pub fn meta(&self, idx: u32) -> Meta {
        self.meta[idx as usize]
    }

    /// Remember `meta` about the frame in buffer `idx` (until it is given back).
    pub fn set_meta(&mut self, idx: u32, meta: Meta) {
        self.meta[idx as usize] = meta;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_fill_give() {
        let mut b = Buffers::new(3);
        let i = b.take().unwrap();
        b.space(i)[..4].copy_from_slice(b"abcd");
        b.set_len(i, 4);
        assert_eq!(b.frame(i), b"abcd");
        let m = Meta {
            arrived: 5,
            l3: 24,
            ethertype: 0x0800,
        };
        b.set_meta(i, m);
        b.frame_mut(i)[0] = b'x';
        assert_eq!((b.meta(i), b.frame(i)), (m, &b"xbcd"[..]));
        assert_eq!(b.available(), 2);
        b.give(i);
        assert_eq!(b.available(), 3);
        assert_eq!(
            b.meta(i),
            Meta::default(),
            "a returned buffer forgets its frame"
        );
        let all: Vec<u32> = std::iter::from_fn(|| b.take()).collect();
        assert_eq!(all.len(), 3);
    }
}
