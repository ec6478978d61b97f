//! The compiled rule matcher: host suffix index → path prefixes, most specific rule first.
