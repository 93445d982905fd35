//! Head/tail text bounding (kernel-spec R25).

/// The marker between the kept head and tail.
pub const HEAD_TAIL_MARKER: &str = "\n...\n";

/// Bounds `text` to `cap` characters (code points), keeping the first two
/// thirds and the end with [`HEAD_TAIL_MARKER`] between them.
///
/// When truncation happens the result is exactly `cap` characters long; a
/// non-positive `cap` gives `""`; caps too small for the marker keep the
/// first `cap` characters.
pub fn bound_head_tail(text: &str, cap: i64) -> String {
    let len = text.chars().count();
    if i64::try_from(len).is_ok_and(|l| l <= cap) {
        return text.to_owned();
    }
    if cap <= 0 {
        return String::new();
    }
    // cap < len here, so it fits in usize.
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    let marker_len = HEAD_TAIL_MARKER.chars().count();
    if cap <= marker_len {
        return crate::pytext::take_chars(text, cap).to_owned();
    }
    let head = 2 * cap / 3;
    let tail = cap as i64 - head as i64 - marker_len as i64;
    if tail <= 0 {
        return crate::pytext::take_chars(text, cap).to_owned();
    }
    let tail = tail as usize;
    let mut out = crate::pytext::take_chars(text, head).to_owned();
    out.push_str(HEAD_TAIL_MARKER);
    let tail_start = text
        .char_indices()
        .nth(len - tail)
        .map_or(text.len(), |(b, _)| b);
    out.push_str(&text[tail_start..]);
    out
}
