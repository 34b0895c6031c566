// Entry point for the Remotion bundle (bundled by worker/bundle.mjs).
import {registerRoot} from 'remotion';
import {RemotionRoot} from './Root';

registerRoot(RemotionRoot);
