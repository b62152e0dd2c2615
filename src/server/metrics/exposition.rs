//! The Prometheus text exposition format, version 0.0.4: `# HELP` and `# TYPE` lines, then
//! one sample a line, `name{label="value",...} value`, every sample carrying the global
//! labels (the `alias`, as the metrics module adds its global labels).
//!
//! Owns the syntax (escaping, number formatting, families written once each); knows
//! nothing of where the numbers come from, and of no socket.

use std::fmt::Write;

/// The content type of the text this writes.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A metric family's type, as `# TYPE` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    Counter,
    Gauge,
}

impl MetricKind {
    fn name(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
        }
    }
}

/// A sample's value: a count or a measure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SampleValue {
    Count(u64),
    Measure(f64),
}

impl From<u64> for SampleValue {
    fn from(count: u64) -> SampleValue {
        SampleValue::Count(count)
    }
}

impl From<f64> for SampleValue {
    fn from(measure: f64) -> SampleValue {
        SampleValue::Measure(measure)
    }
}

/// A scrape's text, written family by family.
pub struct Exposition {
    text: String,
    /// `alias="..."`, escaped once, put first in every sample's labels.
    global_labels: String,
    /// The family the samples belong to (a sample of another is a bug).
    family: String,
}

impl Exposition {
    pub fn new(alias: &str) -> Exposition {
        let mut global_labels = String::from("alias=\"");
        escape_label_value(alias, &mut global_labels);
        global_labels.push('"');
        Exposition {
            text: String::with_capacity(16 * 1024),
            global_labels,
            family: String::new(),
        }
    }

    /// Starts family `name`: its help and type lines. Each family is started once.
    pub fn family(&mut self, name: &str, kind: MetricKind, help: &str) {
        debug_assert!(is_metric_name(name), "{name}");
        debug_assert!(!help.contains('\n') && !help.contains('\\'), "{help}");
        debug_assert!(
            !self.text.contains(&format!("# TYPE {name} ")),
            "family {name} written twice"
        );
        self.family.clear();
        self.family.push_str(name);
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {}", kind.name());
    }

    /// One sample of the current family, with `labels` after the global ones.
    pub fn sample(&mut self, labels: &[(&str, &str)], value: impl Into<SampleValue>) {
        assert!(!self.family.is_empty(), "a sample before its family");
        self.text.push_str(&self.family);
        self.text.push('{');
        self.text.push_str(&self.global_labels);
        for (name, label_value) in labels {
            debug_assert!(is_label_name(name), "{name}");
            let _ = write!(self.text, ",{name}=\"");
            escape_label_value(label_value, &mut self.text);
            self.text.push('"');
        }
        self.text.push_str("} ");
        match value.into() {
            SampleValue::Count(count) => {
                let _ = write!(self.text, "{count}");
            }
            SampleValue::Measure(measure) => write_float(measure, &mut self.text),
        }
        self.text.push('\n');
    }

    /// Starts a family and writes its one sample.
    pub fn single(
        &mut self,
        name: &str,
        kind: MetricKind,
        help: &str,
        value: impl Into<SampleValue>,
    ) {
        self.family(name, kind, help);
        self.sample(&[], value);
    }

    pub fn into_text(self) -> String {
        self.text
    }
}

/// A label value with `\`, `"` and line feeds escaped, as the format requires.
fn escape_label_value(value: &str, out: &mut String) {
    for char in value.chars() {
        match char {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            other => out.push(other),
        }
    }
}

/// A float as Go's `strconv.ParseFloat` reads it: `NaN`, `+Inf`, `-Inf` or decimal digits.
fn write_float(value: f64, out: &mut String) {
    if value.is_nan() {
        out.push_str("NaN");
    } else if value.is_infinite() {
        out.push_str(if value > 0.0 { "+Inf" } else { "-Inf" });
    } else {
        let _ = write!(out, "{value}");
    }
}

fn is_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|char| char.is_ascii_alphanumeric() || char == '_')
}

fn is_label_name(name: &str) -> bool {
    is_metric_name(name) && !name.starts_with("__")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_is_its_help_and_type_then_samples_with_the_alias_first() {
        let mut exposition = Exposition::new("tarn \"1\"\\\n");
        exposition.family("tnt_space_len", MetricKind::Gauge, "Space length");
        exposition.sample(&[("name", "kv"), ("engine", "memtx")], 3u64);
        exposition.single(
            "tnt_info_uptime",
            MetricKind::Gauge,
            "Tarantool uptime",
            1.5,
        );
        assert_eq!(
            exposition.into_text(),
            "# HELP tnt_space_len Space length\n\
             # TYPE tnt_space_len gauge\n\
             tnt_space_len{alias=\"tarn \\\"1\\\"\\\\\\n\",name=\"kv\",engine=\"memtx\"} 3\n\
             # HELP tnt_info_uptime Tarantool uptime\n\
             # TYPE tnt_info_uptime gauge\n\
             tnt_info_uptime{alias=\"tarn \\\"1\\\"\\\\\\n\"} 1.5\n"
        );
    }

    #[test]
    fn floats_are_what_prometheus_parses() {
        let mut text = String::new();
        for value in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, 1e-7, 2e20] {
            write_float(value, &mut text);
            text.push(' ');
        }
        assert_eq!(text, "NaN +Inf -Inf 0 0.0000001 200000000000000000000 ");
    }
}
