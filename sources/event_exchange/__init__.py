"""The broker's event exchange (`amq.rabbitmq.event`, the rabbitmq_event_exchange plugin): connections and
channels as they open and close, each named by the client that opened it, a connection shorter than a poll too.
The events carry no reason (the node's log has those).

messages  what one event says, into ackscope.model.events' records (no I/O)
watch     a queue of ackscope's own bound to the exchange, read in the background and handed over at each poll
"""
