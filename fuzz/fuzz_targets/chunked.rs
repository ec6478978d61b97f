//! The chunked scanner never panics and gives the same answer however the body is split.
#![no_main]
use leash_proxy::wire::chunked::ChunkedScanner;
use libfuzzer_sys::fuzz_target;

fn scan(parts: &[&[u8]]) -> Result<(usize, bool), String> {
    let mut s = ChunkedScanner::new();
    let mut total = 0;
    for part in parts {
        let used = s.feed(part).map_err(|e| e.to_string())?;
        total += used;
        if s.is_done() {
            break;
        }
    }
    Ok((total, s.is_done()))
}

fuzz_target!(|data: &[u8]| {
    if data.is_empty() {
        return;
    }
    let cut = usize::from(data[0]) % data.len();
    let body = &data[1..];
    let cut = cut.min(body.len());
    let whole = scan(&[body]);
    let split = scan(&[&body[..cut], &body[cut..]]);
    if let (Ok(a), Ok(b)) = (&whole, &split) {
        assert_eq!(a, b);
    }
});
