//! A log-linear latency histogram: exact below 64 ns, then 32 buckets per power of two
//! (relative error under 1/32 ≈ 3 %), so memory is fixed (1920 counters, 15 KiB) however
//! long the run, and histograms of many connections merge by adding counters.

const SUB_BITS: u32 = 5;
const SUB_COUNT: usize = 1 << SUB_BITS;
/// Values below this are their own bucket.
const LINEAR_LIMIT: u64 = 2 * SUB_COUNT as u64;
/// Enough buckets for every u64: 2^63 has shift 58, so buckets end at (58 + 2) x 32.
const BUCKET_COUNT: usize = (65 - SUB_BITS as usize) * SUB_COUNT;

#[derive(Clone)]
pub struct Histogram {
    counts: Box<[u64; BUCKET_COUNT]>,
    total: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: Box::new([0; BUCKET_COUNT]),
            total: 0,
            max: 0,
        }
    }
}

fn bucket_of(value: u64) -> usize {
    if value < LINEAR_LIMIT {
        return value as usize;
    }
    let exponent = 63 - value.leading_zeros();
    let shift = exponent - SUB_BITS;
    let sub = (value >> shift) as usize - SUB_COUNT;
    (shift as usize + 1) * SUB_COUNT + sub
}

/// The largest value that falls in `bucket`.
fn bucket_high(bucket: usize) -> u64 {
    if bucket < LINEAR_LIMIT as usize {
        return bucket as u64;
    }
    let shift = bucket / SUB_COUNT - 1;
    let sub = (bucket % SUB_COUNT + SUB_COUNT) as u64;
    (((sub + 1) as u128) << shift)
        .saturating_sub(1)
        .min(u64::MAX as u128) as u64
}

impl Histogram {
    pub fn record(&mut self, value: u64) {
        self.record_many(value, 1);
    }

    /// Records `count` observations of `value` (a round of `count` requests that all took
    /// the round's time).
    pub fn record_many(&mut self, value: u64, count: u64) {
        if count == 0 {
            return;
        }
        self.counts[bucket_of(value)] += count;
        self.total += count;
        self.max = self.max.max(value);
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts.iter()) {
            *mine += theirs;
        }
        self.total += other.total;
        self.max = self.max.max(other.max);
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    pub fn max(&self) -> u64 {
        self.max
    }

    /// The value at `quantile` (0..=1): the upper bound of the bucket holding it, capped by
    /// the exact maximum, so it never under-reports. `None` when empty.
    pub fn quantile(&self, quantile: f64) -> Option<u64> {
        assert!((0.0..=1.0).contains(&quantile), "quantile {quantile}");
        if self.total == 0 {
            return None;
        }
        let rank = ((quantile * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (bucket, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(bucket_high(bucket).min(self.max));
            }
        }
        unreachable!("rank {rank} beyond total {}", self.total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_bounded() {
        let mut previous = 0;
        for value in (0..100_000u64).chain([u64::MAX / 2, u64::MAX]) {
            let bucket = bucket_of(value);
            assert!(bucket < BUCKET_COUNT);
            assert!(value <= bucket_high(bucket), "{value} above its bucket");
            if value > 0 && value < 100_000 {
                assert!(bucket == previous || bucket == previous + 1);
            }
            previous = bucket;
        }
        assert_eq!(bucket_of(u64::MAX), BUCKET_COUNT - 1);
    }

    #[test]
    fn relative_error_is_under_one_thirty_second() {
        for value in [64u64, 100, 1_000, 12_345, 1_000_000, 987_654_321] {
            let high = bucket_high(bucket_of(value));
            assert!(
                (high - value) as f64 / value as f64 <= 1.0 / 32.0,
                "{value} {high}"
            );
        }
    }

    #[test]
    fn quantiles_of_known_input() {
        let mut h = Histogram::default();
        for value in 1..=1000u64 {
            h.record(value);
        }
        assert_eq!(h.count(), 1000);
        let p50 = h.quantile(0.5).unwrap();
        assert!((500..=515).contains(&p50), "{p50}");
        let p99 = h.quantile(0.99).unwrap();
        assert!((990..=1000).contains(&p99), "{p99}");
        assert_eq!(h.quantile(1.0), Some(1000));
        assert_eq!(h.max(), 1000);
        assert_eq!(Histogram::default().quantile(0.5), None);
    }

    #[test]
    fn merge_adds() {
        let mut a = Histogram::default();
        let mut b = Histogram::default();
        a.record(10);
        b.record(5_000);
        a.merge(&b);
        assert_eq!(a.count(), 2);
        assert_eq!(a.max(), 5_000);
        assert_eq!(a.quantile(0.5), Some(10));
    }
}
