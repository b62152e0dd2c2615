//! crud's error objects: string-keyed maps `{class_name, err, str, file, line
//! [, operation_data]}` returned as the second value of a call (spec §18.3).
//!
//! `str` is always `class_name .. ": " .. err`; `file` and `line` are informational.

use super::mp::write_map_len;
use crate::storage::msgpack::{write_str, write_uint};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrudError {
    pub class_name: &'static str,
    pub err: String,
    pub file: &'static str,
    /// Raw msgpack of the tuple or object concerned (`*_many` only).
    pub operation_data: Option<Vec<u8>>,
}

impl CrudError {
    pub fn new(class_name: &'static str, file: &'static str, err: impl Into<String>) -> Self {
        CrudError {
            class_name,
            err: err.into(),
            file,
            operation_data: None,
        }
    }

    pub fn with_operation_data(mut self, data: &[u8]) -> Self {
        self.operation_data = Some(data.to_vec());
        self
    }

    /// `<class_name>: <err>`.
    pub fn str(&self) -> String {
        format!("{}: {}", self.class_name, self.err)
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        write_map_len(out, 5 + u32::from(self.operation_data.is_some()));
        write_str(out, b"class_name");
        write_str(out, self.class_name.as_bytes());
        write_str(out, b"err");
        write_str(out, self.err.as_bytes());
        write_str(out, b"str");
        write_str(out, self.str().as_bytes());
        write_str(out, b"file");
        write_str(out, self.file.as_bytes());
        write_str(out, b"line");
        // Informational only: clients never read it.
        write_uint(out, 1);
        if let Some(data) = &self.operation_data {
            write_str(out, b"operation_data");
            out.extend_from_slice(data);
        }
    }
}

/// `Space "<name>" doesn't exist`.
pub fn no_such_space(name: &str) -> String {
    format!("Space \"{name}\" doesn't exist")
}
