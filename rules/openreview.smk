# MCiteBench sources (OpenReview harvest, MinerU parsing): filled in by its issue
