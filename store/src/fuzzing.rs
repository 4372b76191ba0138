//! Entry points for the fuzz targets (`fuzz/`, feature `fuzzing`): the
//! decoders of bytes the store reads back from disk, which must answer
//! `Corrupt` for any damage, never panic or read out of bounds.

use crate::error::Result;

/// Decodes an untrusted stored value every way the store does: the whole
/// entity, and property by property with the typed readers the scan uses.
pub fn decode_value(value: &[u8]) -> Result<usize> {
    let entity = crate::codec::decode_entity("pk", "rk", value, None)?;
    let only = ["a".to_owned()];
    let _ = crate::codec::decode_entity("pk", "rk", value, Some(&only));
    let (_, props) = crate::codec::open_value(value)?;
    let mut n = entity.properties.len();
    for p in props {
        let p = p?;
        let _ = (p.int32(), p.int64(), p.double(), p.name_cmp("m"));
        n += usize::from(p.value().is_ok());
    }
    Ok(n)
}

/// Reads an untrusted chunk of the packed layout: its entries in order and
/// a binary search for `key`.
pub fn read_chunk(chunk: &[u8], key: &[u8]) -> Result<usize> {
    crate::engine::packed::read_untrusted_chunk(chunk, key)
}
