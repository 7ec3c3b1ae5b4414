//! Hash slots: single slots, inclusive ranges, and sets over the 16384 slots of a Valkey cluster.

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

/// The number of hash slots in a Valkey cluster.
pub const SLOT_COUNT: u16 = 16384;

/// One hash slot, `0..SLOT_COUNT`.
pub type Slot = u16;

/// A slot or range that is not of the form `a` or `a-b` with `a <= b < 16384`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("not a slot range within 0-16383: `{0}`")]
pub struct SlotRangeError(pub String);

/// An inclusive range of slots, `start..=end`, never empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SlotRange {
    start: Slot,
    end: Slot,
}

impl SlotRange {
    /// The range `start..=end`; `None` unless `start <= end < SLOT_COUNT`.
    pub fn new(start: Slot, end: Slot) -> Option<Self> {
        (start <= end && end < SLOT_COUNT).then_some(Self { start, end })
    }

    /// The range holding the one slot `slot`; `None` when it is not a slot.
    pub fn single(slot: Slot) -> Option<Self> {
        Self::new(slot, slot)
    }

    pub fn start(&self) -> Slot {
        self.start
    }

    pub fn end(&self) -> Slot {
        self.end
    }

    /// How many slots the range holds (at least one).
    pub fn len(&self) -> usize {
        usize::from(self.end - self.start) + 1
    }

    /// Always false: a range holds at least one slot. Present because `len` is.
    pub fn is_empty(&self) -> bool {
        false
    }

    pub fn contains(&self, slot: Slot) -> bool {
        self.start <= slot && slot <= self.end
    }

    pub fn slots(&self) -> impl Iterator<Item = Slot> + use<> {
        self.start..=self.end
    }
}

impl fmt::Display for SlotRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.start == self.end {
            write!(f, "{}", self.start)
        } else {
            write!(f, "{}-{}", self.start, self.end)
        }
    }
}

impl FromStr for SlotRange {
    type Err = SlotRangeError;

    /// `a` or `a-b`, the form CLUSTER NODES and GETSLOTMIGRATIONS use.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || SlotRangeError(text.to_owned());
        let (start, end) = match text.split_once('-') {
            Some((start, end)) => (start, end),
            None => (text, text),
        };
        let start = start.parse::<Slot>().map_err(|_| bad())?;
        let end = end.parse::<Slot>().map_err(|_| bad())?;
        Self::new(start, end).ok_or_else(bad)
    }
}

const WORDS: usize = SLOT_COUNT as usize / 64;

/// A set of slots, stored as a 16384-bit bitmap (2 KiB), so every operation is exact and cheap.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SlotSet {
    bits: Box<[u64; WORDS]>,
}

impl Default for SlotSet {
    fn default() -> Self {
        Self::new()
    }
}

impl SlotSet {
    /// The empty set.
    pub fn new() -> Self {
        Self {
            bits: Box::new([0; WORDS]),
        }
    }

    /// All 16384 slots.
    pub fn all() -> Self {
        Self {
            bits: Box::new([u64::MAX; WORDS]),
        }
    }

    pub fn from_range(range: SlotRange) -> Self {
        let mut set = Self::new();
        set.insert_range(range);
        set
    }

    pub fn from_ranges(ranges: impl IntoIterator<Item = SlotRange>) -> Self {
        let mut set = Self::new();
        for range in ranges {
            set.insert_range(range);
        }
        set
    }

    /// Inserts `slot`; slots outside `0..SLOT_COUNT` are ignored.
    pub fn insert(&mut self, slot: Slot) {
        if slot < SLOT_COUNT {
            self.bits[usize::from(slot / 64)] |= 1 << (slot % 64);
        }
    }

    pub fn remove(&mut self, slot: Slot) {
        if slot < SLOT_COUNT {
            self.bits[usize::from(slot / 64)] &= !(1 << (slot % 64));
        }
    }

    /// Word by word: CLUSTER NODES lists thousands of slots per line, and every view of
    /// every pass is parsed.
    pub fn insert_range(&mut self, range: SlotRange) {
        let (start, end) = (usize::from(range.start), usize::from(range.end));
        let (first, last) = (start / 64, end / 64);
        for (word, bits) in self.bits[first..=last].iter_mut().enumerate() {
            let word = first + word;
            let low = if word == first { start % 64 } else { 0 };
            let high = if word == last { end % 64 } else { 63 };
            *bits |= (u64::MAX >> (63 - (high - low))) << low;
        }
    }

    pub fn contains(&self, slot: Slot) -> bool {
        slot < SLOT_COUNT && self.bits[usize::from(slot / 64)] & (1 << (slot % 64)) != 0
    }

    /// How many slots the set holds.
    pub fn count(&self) -> usize {
        self.bits.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.bits.iter().all(|w| *w == 0)
    }

    pub fn union(&self, other: &SlotSet) -> SlotSet {
        self.zip(other, |a, b| a | b)
    }

    /// Adds every slot of `other`, in place: folding many sets into one allocates nothing.
    pub fn union_with(&mut self, other: &SlotSet) {
        for (word, theirs) in self.bits.iter_mut().zip(other.bits.iter()) {
            *word |= theirs;
        }
    }

    pub fn intersection(&self, other: &SlotSet) -> SlotSet {
        self.zip(other, |a, b| a & b)
    }

    /// The slots of `self` that are not in `other`.
    pub fn difference(&self, other: &SlotSet) -> SlotSet {
        self.zip(other, |a, b| a & !b)
    }

    /// Every slot not in `self`.
    pub fn complement(&self) -> SlotSet {
        SlotSet::all().difference(self)
    }

    pub fn is_disjoint(&self, other: &SlotSet) -> bool {
        self.bits
            .iter()
            .zip(other.bits.iter())
            .all(|(a, b)| a & b == 0)
    }

    pub fn is_subset(&self, other: &SlotSet) -> bool {
        self.difference(other).is_empty()
    }

    fn zip(&self, other: &SlotSet, op: impl Fn(u64, u64) -> u64) -> SlotSet {
        let mut out = SlotSet::new();
        for (i, word) in out.bits.iter_mut().enumerate() {
            *word = op(self.bits[i], other.bits[i]);
        }
        out
    }

    /// The slots in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = Slot> + '_ {
        self.bits.iter().enumerate().flat_map(|(word, bits)| {
            let base = word * 64;
            let mut rest = *bits;
            std::iter::from_fn(move || {
                if rest == 0 {
                    return None;
                }
                let bit = rest.trailing_zeros() as usize;
                rest &= rest - 1;
                // base + bit < 16384 by construction.
                Some((base + bit) as Slot)
            })
        })
    }

    /// The maximal runs of consecutive slots, in ascending order.
    pub fn ranges(&self) -> Vec<SlotRange> {
        let mut out: Vec<SlotRange> = Vec::new();
        for slot in self.iter() {
            match out.last_mut() {
                Some(last) if last.end + 1 == slot => last.end = slot,
                _ => out.push(SlotRange {
                    start: slot,
                    end: slot,
                }),
            }
        }
        out
    }

    /// The `n` lowest slots of the set (all of them if it holds fewer).
    pub fn lowest(&self, n: usize) -> SlotSet {
        let mut out = SlotSet::new();
        for slot in self.iter().take(n) {
            out.insert(slot);
        }
        out
    }

    /// The `n` highest slots of the set (all of them if it holds fewer).
    pub fn highest(&self, n: usize) -> SlotSet {
        let mut out = SlotSet::new();
        for slot in (0..SLOT_COUNT)
            .rev()
            .filter(|slot| self.contains(*slot))
            .take(n)
        {
            out.insert(slot);
        }
        out
    }
}

impl FromIterator<Slot> for SlotSet {
    fn from_iter<I: IntoIterator<Item = Slot>>(iter: I) -> Self {
        let mut set = SlotSet::new();
        for slot in iter {
            set.insert(slot);
        }
        set
    }
}

impl fmt::Display for SlotSet {
    /// `0-5460,10923`: the ranges in ascending order, comma separated; empty for the empty set.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, range) in self.ranges().iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{range}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for SlotSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SlotSet({self})")
    }
}

impl FromStr for SlotSet {
    type Err = SlotRangeError;

    /// The `Display` form back: ranges separated by commas (spaces allowed around them).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut set = SlotSet::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            set.insert_range(part.parse()?);
        }
        Ok(set)
    }
}

/// Splits the 16384 slots into `n` contiguous ranges in ascending order whose sizes differ by at
/// most one; the first `16384 % n` ranges are the larger ones (for 3 shards: 5462, 5461, 5461,
/// that is `0-5461`, `5462-10922`, `10923-16383`). Empty when `n` is 0; `n` above 16384 is
/// treated as 16384, one slot per range.
pub fn even_split(n: usize) -> Vec<SlotRange> {
    let total = usize::from(SLOT_COUNT);
    let n = n.min(total);
    if n == 0 {
        return Vec::new();
    }
    let (base, larger) = (total / n, total % n);
    let mut ranges = Vec::with_capacity(n);
    let mut start = 0usize;
    for i in 0..n {
        let len = base + usize::from(i < larger);
        // start + len <= 16384 by construction, so both ends fit a Slot.
        let end = start + len - 1;
        ranges.push(SlotRange {
            start: start as Slot,
            end: end as Slot,
        });
        start = end + 1;
    }
    ranges
}

/// How many slots each of `n` shards holds when balanced: `16384 / n`, and one more for
/// `16384 % n` of them. `None` when `n` is 0.
pub fn balanced_sizes(n: usize) -> Option<(usize, usize)> {
    (n > 0).then(|| (usize::from(SLOT_COUNT) / n, usize::from(SLOT_COUNT) % n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(text: &str) -> SlotSet {
        text.parse().unwrap()
    }

    #[test]
    fn parses_and_displays_ranges() {
        assert_eq!(set("0-5460,10923").to_string(), "0-5460,10923");
        assert_eq!(set("3,1,2").to_string(), "1-3");
        assert_eq!(set("").to_string(), "");
        assert_eq!(SlotSet::all().to_string(), "0-16383");
        assert!("16384".parse::<SlotRange>().is_err());
        assert!("5-4".parse::<SlotRange>().is_err());
        assert!("a-4".parse::<SlotRange>().is_err());
        assert!("-4".parse::<SlotRange>().is_err());
        assert!("1-2-3".parse::<SlotRange>().is_err());
    }

    #[test]
    fn set_algebra() {
        let a = set("0-99");
        let b = set("50-149");
        assert_eq!(a.union(&b).to_string(), "0-149");
        assert_eq!(a.difference(&b).to_string(), "0-49");
        assert_eq!(a.intersection(&b).to_string(), "50-99");
        assert_eq!(a.union(&b).count(), 150);
        let mut c = a.clone();
        c.union_with(&b);
        assert_eq!(c, a.union(&b));
        assert!(!a.is_disjoint(&b));
        assert!(set("10-20").is_subset(&a));
        assert_eq!(a.complement().to_string(), "100-16383");
        assert_eq!(set("0-9,20-29").lowest(12).to_string(), "0-9,20-21");
        assert_eq!(set("0-9,20-29").highest(12).to_string(), "8-9,20-29");
        let mut s = SlotSet::new();
        s.insert(16383);
        s.insert(16384);
        assert_eq!(s.count(), 1);
        s.remove(16383);
        assert!(s.is_empty());
    }

    #[test]
    fn ranges_insert_exactly_their_slots() {
        for (start, end) in [
            (0, 0),
            (0, 63),
            (1, 64),
            (63, 64),
            (100, 5000),
            (16320, 16383),
            (0, 16383),
        ] {
            let mut set = SlotSet::new();
            set.insert_range(SlotRange::new(start, end).unwrap());
            let slots: Vec<Slot> = set.iter().collect();
            assert_eq!(slots, (start..=end).collect::<Vec<_>>(), "{start}-{end}");
            assert_eq!(set.count(), usize::from(end - start) + 1);
        }
    }

    #[test]
    fn even_split_is_contiguous_and_balanced() {
        for n in [1usize, 2, 3, 4, 5, 7, 10, 100, 1000, 16383, 16384] {
            let ranges = even_split(n);
            assert_eq!(ranges.len(), n);
            assert_eq!(ranges[0].start(), 0);
            assert_eq!(ranges[n - 1].end(), 16383);
            for pair in ranges.windows(2) {
                assert_eq!(pair[0].end() + 1, pair[1].start());
            }
            let (base, larger) = balanced_sizes(n).unwrap();
            for (i, range) in ranges.iter().enumerate() {
                assert_eq!(range.len(), base + usize::from(i < larger), "n={n} i={i}");
            }
        }
        let three: Vec<String> = even_split(3).iter().map(|r| r.to_string()).collect();
        assert_eq!(three, ["0-5461", "5462-10922", "10923-16383"]);
        assert!(even_split(0).is_empty());
        assert_eq!(even_split(20000).len(), 16384);
    }
}
