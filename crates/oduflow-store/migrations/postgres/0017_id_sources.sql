-- Every way an id becomes known may be recorded on a receipt: an attach
-- whose answer was lost is confirmed by the read that shows the volume
-- attached (`confirmed_by_read`), so it is counted as what it is rather
-- than as an unknown outcome.
ALTER TABLE dispatch_receipts DROP CONSTRAINT dispatch_receipts_resource_id_source_check;
ALTER TABLE dispatch_receipts ADD CONSTRAINT dispatch_receipts_resource_id_source_check
    CHECK (resource_id_source IN ('response', 'adopted_by_label', 'adopted_by_operator',
                                  'confirmed_by_read', 'reclaimed_by_marker'));
