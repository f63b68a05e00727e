"""Kafka client settings shared by the Kafka front ends and the results publisher."""
