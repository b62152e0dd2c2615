//! Update and upsert operations (being written).
