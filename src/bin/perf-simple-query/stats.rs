//! Summary statistics over per-second samples: mean, standard deviation, median, median
//! absolute deviation, max, min — the six numbers perf-simple-query prints for each metric.
//!
//! Leaf functions, pure; a metric that is `n/a` in every sample has no summary (`None`), so
//! an unavailable counter is never turned into a number.

/// The six summary numbers of one metric.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub mean: f64,
    /// Sample standard deviation (divides by n - 1); 0 for a single sample.
    pub stddev: f64,
    /// The middle of the sorted samples; the mean of the two middle ones for an even count.
    pub median: f64,
    /// Median absolute deviation from the median (unscaled).
    pub mad: f64,
    pub max: f64,
    pub min: f64,
}

impl Summary {
    /// `None` for no samples; panics on a NaN sample (a bug in the caller).
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        assert!(samples.iter().all(|x| !x.is_nan()), "NaN sample");
        let count = samples.len() as f64;
        let mean = samples.iter().sum::<f64>() / count;
        let stddev = if samples.len() == 1 {
            0.0
        } else {
            let squares: f64 = samples.iter().map(|x| (x - mean) * (x - mean)).sum();
            (squares / (count - 1.0)).sqrt()
        };
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let median = median_of_sorted(&sorted);
        let mut deviations: Vec<f64> = sorted.iter().map(|x| (x - median).abs()).collect();
        deviations.sort_by(f64::total_cmp);
        let mad = median_of_sorted(&deviations);
        Some(Summary {
            mean,
            stddev,
            median,
            mad,
            max: sorted[sorted.len() - 1],
            min: sorted[0],
        })
    }

    /// Summary of an optional metric over the samples that have it (a second with no
    /// completed operation has no per-op value); `None` if none has it.
    pub fn of_optional(samples: &[Option<f64>]) -> Option<Summary> {
        let values: Vec<f64> = samples.iter().flatten().copied().collect();
        Summary::of(&values)
    }
}

fn median_of_sorted(sorted: &[f64]) -> f64 {
    debug_assert!(!sorted.is_empty());
    let middle = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[middle]
    } else {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn known_odd_input() {
        // Sorted: 1 2 3 4 100. Mean 22, median 3, deviations 2 1 0 1 97 -> MAD 1.
        let s = Summary::of(&[3.0, 1.0, 100.0, 2.0, 4.0]).unwrap();
        assert!(close(s.mean, 22.0));
        // Squares: 441 + 400 + 361 + 324 + 6084 = 7610; / 4 = 1902.5.
        assert!(close(s.stddev, 1902.5f64.sqrt()));
        assert!(close(s.median, 3.0));
        assert!(close(s.mad, 1.0));
        assert_eq!((s.max, s.min), (100.0, 1.0));
    }

    #[test]
    fn known_even_input() {
        // 2 4 4 4 5 5 7 9: mean 5, squares sum 32 -> sample stddev sqrt(32/7).
        let s = Summary::of(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
        assert!(close(s.mean, 5.0));
        assert!(close(s.stddev, (32.0f64 / 7.0).sqrt()));
        assert!(close(s.median, 4.5));
        // Deviations from 4.5: 2.5 .5 .5 .5 .5 .5 2.5 4.5 -> sorted middle two .5 .5.
        assert!(close(s.mad, 0.5));
        assert_eq!((s.max, s.min), (9.0, 2.0));
    }

    #[test]
    fn single_and_empty() {
        let s = Summary::of(&[7.5]).unwrap();
        assert_eq!(
            s,
            Summary {
                mean: 7.5,
                stddev: 0.0,
                median: 7.5,
                mad: 0.0,
                max: 7.5,
                min: 7.5
            }
        );
        assert_eq!(Summary::of(&[]), None);
    }

    #[test]
    fn unavailable_samples_are_left_out() {
        assert_eq!(Summary::of_optional(&[None, None]), None);
        assert_eq!(
            Summary::of_optional(&[Some(1.0), None]).map(|s| s.mean),
            Some(1.0)
        );
        assert_eq!(
            Summary::of_optional(&[Some(1.0), Some(3.0)]).map(|s| s.median),
            Some(2.0)
        );
    }
}
