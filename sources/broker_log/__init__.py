"""The node's log: where the broker says why it closed a channel or a connection, which consumer it timed out, and
which messages it dropped (ackscope.model.events' records); its other warnings and errors are counted as not
understood.

follow   the log as `tail -F` reads it: a file across rotation and truncation, or standard input
lines    what a line says: the plain and JSON formats of RabbitMQ 3.10 to 4.3, into events (or not understood)
watch    a poll's read: the new events, and what could not be read or understood, counted and said once
"""
