# A project's own test suite that starts local servers: what an agent runs most. It
# must pass under `jianmu call bash` with the default settings exactly as it does
# outside jianmu.
import asyncio
import http.server
import multiprocessing
import os
import socket
import socketserver
import tempfile
import threading
import unittest
import urllib.request
import xmlrpc.client
import xmlrpc.server


class Echo(socketserver.StreamRequestHandler):
    def handle(self):
        self.wfile.write(self.rfile.readline())


def serve(server):
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class LocalServers(unittest.TestCase):
    def test_http_server_on_ipv4_loopback(self):
        server = serve(http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler))
        with urllib.request.urlopen("http://127.0.0.1:%d/" % server.server_address[1]) as r:
            self.assertEqual(r.status, 200)
        server.shutdown()

    def test_tcp_on_ipv6_loopback(self):
        class Server6(socketserver.ThreadingTCPServer):
            address_family = socket.AF_INET6

        server = serve(Server6(("::1", 0), Echo))
        with socket.create_connection(("::1", server.server_address[1])) as c:
            c.sendall(b"six\n")
            self.assertEqual(c.makefile().readline(), "six\n")
        server.shutdown()

    def test_udp_on_loopback(self):
        a, b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM), socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        a.bind(("127.0.0.1", 0))
        b.sendto(b"ping", a.getsockname())
        self.assertEqual(a.recv(4), b"ping")

    def test_unix_socket_server(self):
        path = os.path.join(tempfile.mkdtemp(), "s.sock")
        server = serve(socketserver.ThreadingUnixStreamServer(path, Echo))
        with socket.socket(socket.AF_UNIX) as c:
            c.connect(path)
            c.sendall(b"unix\n")
            self.assertEqual(c.makefile().readline(), "unix\n")
        server.shutdown()

    def test_abstract_unix_socket(self):
        s = socket.socket(socket.AF_UNIX)
        s.bind("\0suite-%d" % os.getpid())
        s.listen()
        c = socket.socket(socket.AF_UNIX)
        c.connect("\0suite-%d" % os.getpid())
        s.accept()[0].sendall(b"abstract")
        self.assertEqual(c.recv(8), b"abstract")

    def test_asyncio_streams(self):
        async def main():
            async def handle(reader, writer):
                writer.write(await reader.readline())
                await writer.drain()
                writer.close()

            server = await asyncio.start_server(handle, "127.0.0.1", 0)
            reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
            writer.write(b"async\n")
            line = await reader.readline()
            writer.close()
            server.close()
            return line

        self.assertEqual(asyncio.run(main()), b"async\n")

    def test_xmlrpc(self):
        server = xmlrpc.server.SimpleXMLRPCServer(("127.0.0.1", 0), logRequests=False)
        server.register_function(pow)
        serve(server)
        self.assertEqual(xmlrpc.client.ServerProxy("http://127.0.0.1:%d/" % server.server_address[1]).pow(2, 10), 1024)
        server.shutdown()

    def test_multiprocessing_manager(self):
        with multiprocessing.Manager() as manager:
            shared = manager.dict()
            shared["k"] = 41
            shared["k"] += 1
            self.assertEqual(shared["k"], 42)

    def test_no_route_outside(self):
        for family, address in ((socket.AF_INET, ("192.0.2.1", 9)), (socket.AF_INET6, ("2001:db8::1", 9))):
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                if os.environ.get("SUITE_OUTSIDE") == "1":
                    continue  # run directly, the host may have routes
                with self.assertRaises(OSError):
                    s.connect(address)


if __name__ == "__main__":
    unittest.main()
