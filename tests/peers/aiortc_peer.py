#!/usr/bin/env python3
"""aiortc (PyPI) as a plain WHIP publisher or WHEP viewer, for Ferry's interop tests.

    aiortc_peer.py publish|play URL TOKEN

POSTs the offer (following the gateway's 307 by hand, as urllib will not redirect a POST),
then prints one JSON object per line on stdout:
    {"event": "created", "location": URL}
    {"event": "frames", "video": N, "audio": M}     every 0.5 s (play: frames decoded)
    {"event": "deleted", "status": S}               after stdin closes: DELETE on the Location
and exits. Runs in a network namespace: aiortc gathers no candidates on loopback.
"""
import asyncio
import json
import sys
import urllib.error
import urllib.parse
import urllib.request

from aiortc import (AudioStreamTrack, RTCPeerConnection, RTCSessionDescription,
                    VideoStreamTrack)


def say(**event):
    print(json.dumps(event), flush=True)


def post_offer(url, token, sdp):
    for _ in range(5):
        req = urllib.request.Request(
            url, data=sdp.encode(), method="POST",
            headers={"Content-Type": "application/sdp", "Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                location = urllib.parse.urljoin(url, r.headers["Location"])
                return location, r.read().decode()
        except urllib.error.HTTPError as e:
            if e.code in (307, 308):
                url = urllib.parse.urljoin(url, e.headers["Location"])
                continue
            sys.exit(f"POST {url}: {e.code} {e.read().decode()}")
    sys.exit("too many redirects")


def delete(location):
    req = urllib.request.Request(location, method="DELETE")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


async def main(mode, url, token):
    pc = RTCPeerConnection()
    counts = {"video": 0, "audio": 0}

    async def count(track):
        while True:
            try:
                await track.recv()
            except Exception:
                return
            counts[track.kind] += 1

    if mode == "publish":
        pc.addTransceiver(VideoStreamTrack(), direction="sendonly")
        pc.addTransceiver(AudioStreamTrack(), direction="sendonly")
    else:
        pc.addTransceiver("video", direction="recvonly")
        pc.addTransceiver("audio", direction="recvonly")
        pc.on("track", lambda track: asyncio.ensure_future(count(track)))
    await pc.setLocalDescription(await pc.createOffer())
    loop = asyncio.get_running_loop()
    location, answer = await loop.run_in_executor(
        None, post_offer, url, token, pc.localDescription.sdp)
    say(event="created", location=location)
    await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))

    done = loop.run_in_executor(None, sys.stdin.read)
    while not done.done():
        say(event="frames", state=pc.connectionState, **counts)
        await asyncio.sleep(0.5)
    status = await loop.run_in_executor(None, delete, location)
    say(event="deleted", status=status)
    await pc.close()


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("publish", "play"):
        sys.exit(__doc__)
    asyncio.run(main(*sys.argv[1:]))
