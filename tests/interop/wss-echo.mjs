// A wss:// echo server in Node (https + the ws package), for clients under
// test on a TLS stack that is not Rust's (tests/tls_stacks.rs).
// Usage: node wss-echo.mjs CERT.pem KEY.pem; prints "listening PORT".
import { readFileSync } from "node:fs";
import https from "node:https";
import { WebSocketServer } from "ws";

const [certFile, keyFile] = process.argv.slice(2);
const server = https.createServer({
  cert: readFileSync(certFile),
  key: readFileSync(keyFile),
});
const wss = new WebSocketServer({ server });
wss.on("connection", (ws) => {
  ws.on("message", (data, isBinary) => ws.send(data, { binary: isBinary }));
});
server.listen(0, "127.0.0.1", () => {
  console.log(`listening ${server.address().port}`);
});
