-- Which appliance of a pair refused a certificate on the rejected list, and
-- whether this appliance still has to report one it refused to the primary.
--
-- refused_here:   1 when this appliance refused it itself.
-- refused_by:     the pair address of the other appliance that refused it
--                 and reported it here (the primary lists those); NULL if
--                 none did.
-- report_pending: 1 while a certificate this appliance refused waits to be
--                 listed on the primary (kept across restarts).
-- Only meaningful for kind = 'rejected'.
ALTER TABLE certs ADD COLUMN refused_here INTEGER NOT NULL DEFAULT 1;
ALTER TABLE certs ADD COLUMN refused_by TEXT;
ALTER TABLE certs ADD COLUMN report_pending INTEGER NOT NULL DEFAULT 0;
