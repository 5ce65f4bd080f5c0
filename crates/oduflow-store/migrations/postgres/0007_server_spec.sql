-- Issue 15: the server fields of a client's spec. `image` is the image
-- source as JSON ({"os": 2284}, {"snapshot": "<id>"}, {"app": 2},
-- {"image": "docker"}); NULL in rows written before it existed, whose source
-- is `os_id`. `server` holds hostname, SSH keys, user data, tags, firewall
-- group, IPv6, VPCs and backups as JSON; '{}' in older rows (their VMs were
-- created with the dispatch label as hostname, and keep it).
ALTER TABLE infra ADD COLUMN image TEXT;
ALTER TABLE infra ADD COLUMN server TEXT NOT NULL DEFAULT '{}';
-- What a ready client's server shows: main IPv4, IPv6 and the volume's
-- mount id (never the root password or the console URL).
ALTER TABLE infra ADD COLUMN outputs TEXT NOT NULL DEFAULT '{}';
