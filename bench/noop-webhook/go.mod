module gpushare.local/noop-webhook

go 1.22
