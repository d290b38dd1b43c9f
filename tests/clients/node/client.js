// amqplib as its documentation shows it, with no connection name: one behaviour per run, until killed.
// With VOID_CONNECTION_NAME set, clientProperties.connection_name is null, which amqplib sends as a void
// field (what `connection_name: config.name` sends when the configuration has none).
// Usage: AMQP_URL=amqp://... node client.js <mode> <queue>
//   unlimited        a manual-ack consumer without prefetch that never acks
//   two-consumers    prefetch(10) (per consumer) and two consumers on one channel: one on <queue> that
//                    never acks, one on <queue>.quiet that acks at once
//   plain-publisher  publishes 5 a second without confirms
//   confirm-publisher publishes 5 a second on a confirm channel, and a prefetch-50 consumer acks them
//   nack-requeue     a prefetch-10 consumer that nacks every message with requeue
//   connection-per-message  twice a second: connects, publishes one message, closes (churn)
//   stamped-stuck    publishes 5 messages a second stamped with the time (the timestamp property) on a confirm
//                    channel into <queue>, declared by the caller (of any type), and a prefetch-1 consumer of it
//                    that never acks
'use strict';
const amqp = require('amqplib');

const [mode, queue] = process.argv.slice(2);
const QUEUE_ARGS = { durable: true, arguments: { 'x-expires': 600000 } };

function every(ms, fn) { setInterval(() => { fn().catch(fail); }, ms); }
function fail(err) { console.error(`${mode}: ${err.message}`); process.exit(1); }

async function publishOnce() {
  const conn = await amqp.connect(process.env.AMQP_URL);
  const ch = await conn.createChannel();
  await ch.assertQueue(queue, QUEUE_ARGS);
  ch.sendToQueue(queue, Buffer.from('order'), { persistent: true });
  await ch.close();
  await conn.close();
}

async function main() {
  if (mode === 'connection-per-message') {
    await publishOnce();
    every(500, publishOnce);
    process.on('SIGTERM', () => process.exit(0));
    console.log('ready');
    return;
  }
  const named = process.env.VOID_CONNECTION_NAME ? { clientProperties: { connection_name: null } } : {};
  const conn = await amqp.connect(process.env.AMQP_URL, named);
  process.on('SIGTERM', () => conn.close().finally(() => process.exit(0)));
  if (mode === 'unlimited') {
    const ch = await conn.createChannel();
    await ch.assertQueue(queue, QUEUE_ARGS);
    await ch.consume(queue, () => {}, { noAck: false });
  } else if (mode === 'two-consumers') {
    const ch = await conn.createChannel();
    await ch.assertQueue(queue, QUEUE_ARGS);
    await ch.assertQueue(`${queue}.quiet`, QUEUE_ARGS);
    await ch.prefetch(10);
    await ch.consume(queue, () => {}, { noAck: false });
    await ch.consume(`${queue}.quiet`, (msg) => ch.ack(msg), { noAck: false });
  } else if (mode === 'plain-publisher') {
    const ch = await conn.createChannel();
    await ch.assertQueue(queue, QUEUE_ARGS);
    every(200, async () => { ch.sendToQueue(queue, Buffer.from('order'), { persistent: true }); });
  } else if (mode === 'confirm-publisher') {
    const pub = await conn.createConfirmChannel();
    await pub.assertQueue(queue, QUEUE_ARGS);
    const con = await conn.createChannel();
    await con.prefetch(50);
    await con.consume(queue, (msg) => con.ack(msg), { noAck: false });
    every(200, async () => {
      pub.sendToQueue(queue, Buffer.from('order'), { persistent: true });
      await pub.waitForConfirms();
    });
  } else if (mode === 'nack-requeue') {
    const ch = await conn.createChannel();
    await ch.assertQueue(queue, QUEUE_ARGS);
    await ch.prefetch(10);
    await ch.consume(queue, (msg) => ch.nack(msg, false, true), { noAck: false });
  } else if (mode === 'stamped-stuck') {
    const pub = await conn.createConfirmChannel();
    await pub.checkQueue(queue);
    const con = await conn.createChannel();
    await con.prefetch(1);
    await con.consume(queue, () => {}, { noAck: false });
    every(200, async () => {
      pub.sendToQueue(queue, Buffer.from('order'), { persistent: true, timestamp: Math.floor(Date.now() / 1000) });
      await pub.waitForConfirms();
    });
  } else {
    fail(new Error('unknown mode'));
  }
  console.log('ready');
}

main().catch(fail);
