//! Vultr API v2 adapter (issue 3).
