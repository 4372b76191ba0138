//! Every documented limit of the data model, and the checks that enforce
//! them. Each check fails with its own [`StoreError`] variant so that a
//! caller can tell the user exactly which rule was broken.

use crate::entity::{DateTime, Value, utf16_len};
use crate::error::{KeyKind, Result, StoreError};

/// Maximum key length in UTF-16 code units (1 KiB).
pub const MAX_KEY_UTF16: usize = 512;
/// Maximum properties besides PartitionKey, RowKey and Timestamp.
pub const MAX_PROPERTIES: usize = 252;
/// Maximum property-name length in characters.
pub const MAX_PROPERTY_NAME_CHARS: usize = 255;
/// Maximum Edm.String size in bytes as UTF-16 (64 KiB).
pub const MAX_STRING_BYTES: usize = 64 * 1024;
/// Maximum Edm.Binary size in bytes (64 KiB).
pub const MAX_BINARY_BYTES: usize = 64 * 1024;
/// Maximum entity size by the size formula (1 MiB).
pub const MAX_ENTITY_BYTES: usize = 1024 * 1024;
/// Maximum operations in one entity-group transaction.
pub const MAX_BATCH_OPERATIONS: usize = 100;
/// Maximum payload of one entity-group transaction (4 MiB).
pub const MAX_BATCH_BYTES: usize = 4 * 1024 * 1024;
/// Maximum entities in one query page.
pub const MAX_PAGE_SIZE: usize = 1000;
/// Table-name length bounds.
pub const TABLE_NAME_LEN: std::ops::RangeInclusive<usize> = 3..=63;

/// Property names the store owns.
pub const RESERVED_PROPERTY_NAMES: [&str; 3] = ["PartitionKey", "RowKey", "Timestamp"];

/// Is `c` forbidden in a PartitionKey or RowKey?
pub fn is_forbidden_key_char(c: char) -> bool {
    matches!(c, '/' | '\\' | '#' | '?' | '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}')
}

/// Checks a PartitionKey or RowKey: length and forbidden characters. The
/// empty string is a valid key.
pub fn check_key(kind: KeyKind, key: &str) -> Result<()> {
    if let Some((position, ch)) = key
        .chars()
        .enumerate()
        .find(|(_, c)| is_forbidden_key_char(*c))
    {
        return Err(StoreError::ForbiddenKeyCharacter { kind, ch, position });
    }
    let units = utf16_len(key);
    if units > MAX_KEY_UTF16 {
        return Err(StoreError::KeyTooLong {
            kind,
            units,
            limit: MAX_KEY_UTF16,
        });
    }
    Ok(())
}

/// Checks a table name: 3–63 characters, an ASCII letter first, then ASCII
/// letters, digits or `_`.
pub fn check_table_name(name: &str) -> Result<()> {
    let bad = |reason| {
        Err(StoreError::InvalidTableName {
            name: name.to_owned(),
            reason,
        })
    };
    if !TABLE_NAME_LEN.contains(&name.chars().count()) {
        return bad("a table name has 3 to 63 characters");
    }
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return bad("a table name starts with a letter");
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return bad("a table name has only letters, digits and '_'");
    }
    Ok(())
}

/// Checks a property name: identifier rules (a letter or `_` first, then
/// letters, digits or `_`), at most 255 characters, not a system property.
pub fn check_property_name(name: &str) -> Result<()> {
    let bad = |reason| {
        Err(StoreError::InvalidPropertyName {
            name: name.chars().take(80).collect(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("a property name cannot be empty");
    }
    if name.chars().count() > MAX_PROPERTY_NAME_CHARS {
        return bad("a property name has at most 255 characters");
    }
    if !name.starts_with(|c: char| c.is_alphabetic() || c == '_') {
        return bad("a property name starts with a letter or '_'");
    }
    if !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
        return bad("a property name has only letters, digits and '_'");
    }
    if RESERVED_PROPERTY_NAMES
        .iter()
        .any(|r| r.eq_ignore_ascii_case(name))
    {
        return bad("PartitionKey, RowKey and Timestamp are system properties");
    }
    Ok(())
}

/// Checks one value's own limits (string and binary size, DateTime range).
pub fn check_value(property: &str, value: &Value) -> Result<()> {
    match value {
        Value::String(s) => {
            let size = 2 * utf16_len(s);
            if size > MAX_STRING_BYTES {
                return Err(StoreError::ValueTooLarge {
                    property: property.to_owned(),
                    edm: "Edm.String",
                    size,
                    limit: MAX_STRING_BYTES,
                });
            }
        }
        Value::Binary(b) if b.len() > MAX_BINARY_BYTES => {
            return Err(StoreError::ValueTooLarge {
                property: property.to_owned(),
                edm: "Edm.Binary",
                size: b.len(),
                limit: MAX_BINARY_BYTES,
            });
        }
        Value::DateTime(t) if !t.in_range() => {
            return Err(StoreError::DateTimeOutOfRange {
                property: property.to_owned(),
                micros: t.micros(),
            });
        }
        _ => {}
    }
    Ok(())
}

/// Checks the limits of a whole stored entity: property count and size.
pub fn check_entity(entity: &crate::Entity) -> Result<()> {
    check_entity_parts(
        &entity.partition_key,
        &entity.row_key,
        entity.properties.iter().map(|(k, v)| (k.as_str(), v)),
    )
}

/// [`check_entity`] of an entity given as its keys and its properties, so
/// that a write's own properties are checked without being copied.
pub(crate) fn check_entity_parts<'a>(
    partition_key: &str,
    row_key: &str,
    properties: impl Iterator<Item = (&'a str, &'a Value)> + Clone,
) -> Result<()> {
    let count = properties.clone().count();
    if count > MAX_PROPERTIES {
        return Err(StoreError::TooManyProperties {
            count,
            limit: MAX_PROPERTIES,
        });
    }
    let size = crate::entity::entity_size(partition_key, row_key, properties);
    if size > MAX_ENTITY_BYTES {
        return Err(StoreError::EntityTooLarge {
            partition_key: partition_key.to_owned(),
            row_key: row_key.to_owned(),
            size,
            limit: MAX_ENTITY_BYTES,
        });
    }
    Ok(())
}

/// The DateTime range, re-exported for callers that build values.
pub const DATETIME_RANGE: std::ops::RangeInclusive<DateTime> = DateTime::MIN..=DateTime::MAX;
