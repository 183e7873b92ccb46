"""Translation with posattn: parallel data, training, greedy and beam-search decoding, BLEU and
chrF (DIET Sec. 4.3, Table 4)."""
