//! Bytes read back from disk: a stored entity value and a packed chunk.
//! Damage must be answered with `Corrupt`, never a panic or an
//! out-of-bounds read.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte splits the input: a value, or a chunk and a key.
    let Some((&how, rest)) = data.split_first() else {
        return;
    };
    if how & 1 == 0 {
        let _ = tablegate_store::fuzzing::decode_value(rest);
    } else {
        let cut = (how as usize >> 1).min(rest.len());
        let (key, chunk) = rest.split_at(cut);
        let _ = tablegate_store::fuzzing::read_chunk(chunk, key);
    }
});
