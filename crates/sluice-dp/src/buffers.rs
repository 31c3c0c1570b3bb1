//! Frame buffers: two arenas, allocated at start, of fixed-size buffers: *large* ones that hold
//! the largest frame a port delivers (a 64 KiB GSO super-frame plus its virtio-net header), and
//! *small* ones for the frames that are most of the traffic when many flows share a link.
//!
//! A buffer is named by its index, which is what travels through the scheduler as a packet's
//! token: large buffers are `0..large`, small ones follow. A port reads into a large buffer (a
//! read must have room for the largest frame); a frame that fits a small buffer is then copied
//! into one ([`Buffers::shrink`]) and the large buffer goes straight back to the pool. Why: TCP
//! sizes its GSO frames to about 1 ms of its rate, at least two segments (2972 bytes with a
//! 1448-byte MSS), so with 100 or 1000 flows sharing a link nearly every frame is a few KiB.
//! Held in 64 KiB buffers, 256 MiB held only 4096 of them: 1000 flows filled it, the daemon
//! stopped reading, and frames waited (or were dropped) in the kernel's tap queue, where no
//! scheduler sees them (measured with `sluice bench dp --flows 1000 --targets 100mbit`: RTT
//! p50 about 1 s and Jain's index 0.03 to 0.2, against 0.4 ms and 0.8 with 2 GiB of large
//! buffers). The copy of at most [`SMALL_SIZE`] bytes costs far less than the read and write
//! system calls of the same frame; large frames are never copied.
//!
//! The memory bound is the two arenas together (see [`Buffers::with_memory`]); when no large
//! buffer is free the reader stops reading until a frame leaves (see `datapath`).

/// Bytes per large buffer: a 64 KiB frame and a 12-byte virtio-net header, rounded up.
pub const BUF_SIZE: usize = 65_536 + 64;

/// Bytes per small buffer: a frame of two full segments with its headers and virtio-net
/// header (TCP's smallest GSO frame), with room to spare.
pub const SMALL_SIZE: usize = 4096;

/// The fewest large buffers a pool has (so a few big frames can always be read).
pub const MIN_LARGE: usize = 16;

/// The least memory that buys [`MIN_LARGE`] large buffers in its three quarters.
pub const MIN_MEMORY: usize = (MIN_LARGE * BUF_SIZE).div_ceil(3) * 4;

/// A pool of frame buffers.
pub struct Buffers {
    large: Vec<u8>,
    small: Vec<u8>,
    /// Number of large buffers: indices below are large, the rest small.
    large_count: u32,
    lens: Vec<u32>,
    meta: Vec<Meta>,
    free_large: Vec<u32>,
    free_small: Vec<u32>,
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
    /// `large` buffers of [`BUF_SIZE`] bytes and `small` ones of [`SMALL_SIZE`].
    pub fn new(large: usize, small: usize) -> Self {
        let count = large + small;
        Buffers {
            large: vec![0; large * BUF_SIZE],
            small: vec![0; small * SMALL_SIZE],
            large_count: large as u32,
            lens: vec![0; count],
            meta: vec![Meta::default(); count],
            free_large: (0..large as u32).rev().collect(),
            free_small: (large as u32..count as u32).rev().collect(),
        }
    }

    /// The buffers `memory` bytes buy: three quarters in large buffers (at least
    /// [`MIN_LARGE`]), the rest in small ones.
    pub fn with_memory(memory: usize) -> Self {
        let (large, small) = Self::split(memory);
        Self::new(large, small)
    }

    /// How many large and small buffers `memory` bytes buy (see [`Buffers::with_memory`]).
    pub fn split(memory: usize) -> (usize, usize) {
        let large = (memory / 4 * 3 / BUF_SIZE).max(MIN_LARGE);
        let small = memory.saturating_sub(large * BUF_SIZE) / SMALL_SIZE;
        (large, small)
    }

    /// Buffers in the pool, large and small: the most frames it holds.
    pub fn count(&self) -> usize {
        self.lens.len()
    }

    /// Buffers free now, large and small.
    pub fn available(&self) -> usize {
        self.free_large.len() + self.free_small.len()
    }

    /// Whether a frame can be read now: a large buffer is free.
    pub fn can_read(&self) -> bool {
        !self.free_large.is_empty()
    }

    /// Take a free large buffer, to read a frame into.
    pub fn take(&mut self) -> Option<u32> {
        self.free_large.pop()
    }

    /// Move the frame in large buffer `idx` into a small buffer if it fits and one is free,
    /// giving `idx` back; returns the buffer that holds the frame now (`idx` if it stayed).
    pub fn shrink(&mut self, idx: u32) -> u32 {
        let len = self.lens[idx as usize] as usize;
        if idx >= self.large_count || len > SMALL_SIZE {
            return idx;
        }
        let Some(small) = self.free_small.pop() else {
            return idx;
        };
        let from = idx as usize * BUF_SIZE;
        let to = self.small_start(small);
        self.small[to..to + len].copy_from_slice(&self.large[from..from + len]);
        self.lens[small as usize] = len as u32;
        self.meta[small as usize] = self.meta[idx as usize];
        self.give(idx);
        small
    }

    /// Give buffer `idx` back.
    pub fn give(&mut self, idx: u32) {
        debug_assert!(
            !self.free_large.contains(&idx) && !self.free_small.contains(&idx),
            "buffer {idx} given back twice"
        );
        self.lens[idx as usize] = 0;
        self.meta[idx as usize] = Meta::default();
        if idx < self.large_count {
            self.free_large.push(idx);
        } else {
            self.free_small.push(idx);
        }
    }

    fn small_start(&self, idx: u32) -> usize {
        (idx - self.large_count) as usize * SMALL_SIZE
    }

    /// The whole of large buffer `idx`, to read a frame into.
    pub fn space(&mut self, idx: u32) -> &mut [u8] {
        debug_assert!(idx < self.large_count, "reads go to large buffers");
        let start = idx as usize * BUF_SIZE;
        &mut self.large[start..start + BUF_SIZE]
    }

    /// Record that buffer `idx` holds `len` bytes.
    pub fn set_len(&mut self, idx: u32, len: usize) {
        let size = if idx < self.large_count {
            BUF_SIZE
        } else {
            SMALL_SIZE
        };
        self.lens[idx as usize] = len.min(size) as u32;
    }

    /// Where the frame in buffer `idx` lies: in the large arena or not, its start and length.
    fn locate(&self, idx: u32) -> (bool, usize, usize) {
        let len = self.lens[idx as usize] as usize;
        if idx < self.large_count {
            (true, idx as usize * BUF_SIZE, len)
        } else {
            (false, self.small_start(idx), len)
        }
    }

    /// The frame in buffer `idx`.
    pub fn frame(&self, idx: u32) -> &[u8] {
        let (large, start, len) = self.locate(idx);
        let arena = if large { &self.large } else { &self.small };
        &arena[start..start + len]
    }

    /// The frame in buffer `idx`, to change in place.
    pub fn frame_mut(&mut self, idx: u32) -> &mut [u8] {
        let (large, start, len) = self.locate(idx);
        let arena = if large {
            &mut self.large
        } else {
            &mut self.small
        };
        &mut arena[start..start + len]
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

    /// A large buffer holding `bytes`, with `meta`.
    fn read(b: &mut Buffers, bytes: &[u8], meta: Meta) -> u32 {
        let i = b.take().unwrap();
        b.space(i)[..bytes.len()].copy_from_slice(bytes);
        b.set_len(i, bytes.len());
        b.set_meta(i, meta);
        i
    }

    const M: Meta = Meta {
        arrived: 5,
        l3: 24,
        ethertype: 0x0800,
    };

    #[test]
    fn take_fill_give() {
        let mut b = Buffers::new(3, 0);
        let i = read(&mut b, b"abcd", M);
        assert_eq!(b.frame(i), b"abcd");
        b.frame_mut(i)[0] = b'x';
        assert_eq!((b.meta(i), b.frame(i)), (M, &b"xbcd"[..]));
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
        assert!(!b.can_read());
    }

    #[test]
    fn a_small_frame_moves_to_a_small_buffer_and_frees_the_large_one() {
        let mut b = Buffers::new(2, 3);
        assert_eq!((b.count(), b.available()), (5, 5));
        let frame: Vec<u8> = (0..SMALL_SIZE).map(|i| i as u8).collect();
        let i = read(&mut b, &frame, M);
        let s = b.shrink(i);
        assert!(s >= 2, "a frame of exactly SMALL_SIZE bytes fits");
        assert_eq!((b.frame(s), b.meta(s)), (&frame[..], M));
        assert_eq!(
            b.meta(i),
            Meta::default(),
            "the large buffer was given back"
        );
        assert_eq!(b.available(), 4);
        b.frame_mut(s)[0] = 0xff;
        assert_eq!(b.frame(s)[0], 0xff);
        assert_eq!(b.shrink(s), s, "a small buffer stays");
        b.give(s);
        assert_eq!(b.available(), 5);
    }

    #[test]
    fn a_large_frame_stays_and_a_full_small_pool_keeps_small_frames_large() {
        let mut b = Buffers::new(3, 1);
        let big = vec![7u8; SMALL_SIZE + 1];
        let i = read(&mut b, &big, M);
        assert_eq!(b.shrink(i), i);
        assert_eq!(b.frame(i), &big[..]);
        let one = read(&mut b, b"one", M);
        let s = b.shrink(one);
        assert!(s >= 3);
        let j = read(&mut b, b"two", M);
        assert_eq!(
            b.shrink(j),
            j,
            "no small buffer free: the frame stays where it is"
        );
        assert_eq!((b.frame(s), b.frame(j)), (&b"one"[..], &b"two"[..]));
        assert!(b.can_read());
        assert_eq!(b.available(), 1);
        b.give(s);
        b.give(j);
        b.give(i);
        assert_eq!(b.available(), 4);
        let mut larges: Vec<u32> = std::iter::from_fn(|| b.take()).collect();
        larges.sort_unstable();
        assert_eq!(
            larges,
            vec![0, 1, 2],
            "each buffer went back to its own pool"
        );
    }

    #[test]
    fn memory_is_split_three_quarters_large_and_stays_within_the_bound() {
        for memory in [MIN_MEMORY, 64 << 20, 256 << 20, 1 << 30, 3 << 30] {
            let (large, small) = Buffers::split(memory);
            assert!(large >= MIN_LARGE, "{memory}");
            assert!(large * BUF_SIZE + small * SMALL_SIZE <= memory, "{memory}");
            assert!(large * BUF_SIZE <= memory / 4 * 3, "{memory}");
            assert!(
                small * SMALL_SIZE + BUF_SIZE + SMALL_SIZE > memory / 4,
                "{memory}"
            );
        }
        assert_eq!(Buffers::split(256 << 20), (3069, 16384));
        assert_eq!(
            Buffers::split(1000).0,
            MIN_LARGE,
            "never fewer large buffers"
        );
    }
}
